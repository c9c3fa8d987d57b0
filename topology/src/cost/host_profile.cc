// Host-only cost profile: memcpy bandwidth and TCP loopback latency/bandwidth, each bounded in time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "commkit/common/socket.h"
#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"

namespace commkit::topology {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void SetTimeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO: the kernel wakes a waiting call (no poll() in the
// timed ping-pong); the deadline bounds the whole measurement.
bool SendAll(int fd, const char* p, std::size_t n, Clock::time_point deadline) {
  return net::SendAll(fd, std::string_view(p, n), deadline).ok();
}
bool RecvAll(int fd, char* p, std::size_t n, Clock::time_point deadline) { return net::RecvExact(fd, p, n, deadline).ok(); }

// Ping-pong then one-way stream over 127.0.0.1; false (with a note) on any failure or timeout.
bool MeasureLoopback(const HostProfileOptions& o, HostProfile& out) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener.fd, 1) != 0 ||
      ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return false;
  SetTimeouts(listener.fd, o.time_limit_s);
  const std::size_t chunk = 1 << 20;
  const int pings = std::max(1, o.pingpongs);
  const std::size_t stream = std::max(chunk, o.stream_bytes);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.time_limit_s));
  std::thread echo([&] {
    auto fd = net::ConnectWithDeadline("127.0.0.1", ntohs(addr.sin_port), deadline);
    if (!fd.ok()) return;
    Fd client(*fd);
    if (!net::SetBlocking(client.fd, true).ok()) return;
    SetTimeouts(client.fd, o.time_limit_s);
    char b = 0;
    for (int i = 0; i < pings; ++i)
      if (!RecvAll(client.fd, &b, 1, deadline) || !SendAll(client.fd, &b, 1, deadline)) return;
    std::vector<char> buf(chunk);
    for (std::size_t done = 0; done < stream; done += chunk)
      if (!RecvAll(client.fd, buf.data(), chunk, deadline)) return;
    SendAll(client.fd, &b, 1, deadline);
  });
  bool ok = false;
  {
    Fd conn(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.fd >= 0) {
      SetTimeouts(conn.fd, o.time_limit_s);
      char b = 1;
      auto t0 = Clock::now();
      int i = 0;
      for (; i < pings; ++i)
        if (!SendAll(conn.fd, &b, 1, deadline) || !RecvAll(conn.fd, &b, 1, deadline)) break;
      auto t1 = Clock::now();
      if (i == pings) {
        out.loopback_alpha_s = Seconds(t0, t1) / pings / 2;
        std::vector<char> buf(chunk, 'x');
        std::size_t done = 0;
        for (; done < stream; done += chunk)
          if (!SendAll(conn.fd, buf.data(), chunk, deadline)) break;
        if (done >= stream && RecvAll(conn.fd, &b, 1, deadline)) {
          out.loopback_beta_Bps = static_cast<double>(stream) / Seconds(t1, Clock::now());
          ok = true;
        }
      }
      ::shutdown(conn.fd, SHUT_RDWR);
    }
  }
  echo.join();
  return ok;
}

}  // namespace

HostProfile ProbeHostProfile(const HostProfileOptions& options) {
  HostProfile p;
  p.cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.memcpy_Bps = 5e9;
  p.loopback_alpha_s = 20e-6;
  p.loopback_beta_Bps = 3e9;
  if (!options.measure) {
    p.notes.push_back("defaults: memcpy 5 GB/s, TCP loopback 20 us and 3 GB/s (not measured)");
    return p;
  }
  const std::size_t n = std::max<std::size_t>(options.memcpy_bytes, 1 << 20);
  std::vector<char> src(n, 1), dst(n, 0);
  std::memcpy(dst.data(), src.data(), n);  // fault the pages in
  double best = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(options.time_limit_s);
  for (int rep = 0; rep < 5 && Clock::now() < deadline; ++rep) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), n);
    const double s = Seconds(t0, Clock::now());
    if (s > 0) best = std::max(best, static_cast<double>(n) / s);
  }
  if (best > 0 && dst[n - 1] == 1) {
    p.memcpy_Bps = best;
    p.notes.push_back(StrCat("memcpy measured over ", HumanBytes(static_cast<double>(n)), " (best of 5)"));
  }
  if (MeasureLoopback(options, p)) {
    p.notes.push_back("TCP loopback measured on 127.0.0.1 (ping-pong and one-way stream)");
  } else {
    p.loopback_alpha_s = 20e-6;
    p.loopback_beta_Bps = 3e9;
    p.notes.push_back("TCP loopback measurement failed or timed out: defaults 20 us, 3 GB/s");
  }
  return p;
}

ClusterShape HostShape(const HostProfile& profile, int ranks, bool tcp) {
  ClusterShape s;
  s.nodes = 1;
  s.ranks_per_node = std::max(1, ranks);
  if (tcp) {
    s.intra = {LinkClass::kLoopback, profile.loopback_alpha_s, profile.loopback_beta_Bps, "TCP loopback (Gloo)"};
  } else {
    s.intra = {LinkClass::kSHM, 1e-6, profile.memcpy_Bps / 2, "shared memory: copy in and out, memcpy/2"};
  }
  return s;
}

}  // namespace commkit::topology
