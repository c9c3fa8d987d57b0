// libFuzzer target for the TcpStore server's handshake and frame handling, over real loopback
// sockets against an in-process TcpStoreServer, plus the bounds-checked codec (Reader).
//
// Input layout: byte 0 selects the mode (byte 0 % 4):
//   0, 2  the rest is sent raw (handshake fuzzing);
//   1     a valid handshake with the server's token, then the rest raw (frame fuzzing);
//   3     a valid handshake, then the rest as requests: each `u16 length, body` chunk is sent as one
//         frame (u32 length + body), so most inputs reach the request handlers, several per connection.
// The fuzzer then half-closes the connection and reads until the server closes it: the server must
// close within a bound (no hang), never crash, and keep answering a well-behaved client.
//
// Every socket call here is non-blocking with poll() against a steady-clock deadline and retried on
// EINTR: libFuzzer's -timeout runs a SIGALRM timer, and a blocking recv() with SO_RCVTIMEO fails with
// EINTR when that signal lands, which once looked like a server that left a connection open.
//
// At exit the target prints how many connections it made and how many requests the server handled
// (docs/fuzzing.md reports these for the long runs).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "commkit/comm/tcp_store.h"
#include "commkit/common/strings.h"
#include "tcp_protocol.h"

namespace {

using namespace commkit;
using Clock = std::chrono::steady_clock;
constexpr char kToken[] = "fuzz-token";
// How long the server may take to close a connection the client has half-closed.
constexpr auto kCloseBound = std::chrono::seconds(10);
// The server keeps every key a fuzzed request sets (up to 8 KiB keys, 64 KiB values); a fresh server
// every this many connections keeps a 10^6-input run within libFuzzer's -rss_limit_mb.
constexpr std::uint64_t kConnectionsPerServer = 50000;

struct Totals {
  std::uint64_t connections = 0;
  std::int64_t requests = 0;          // frames the servers handled (their stats().requests)
  std::int64_t protocol_errors = 0;
  std::int64_t rejected_handshakes = 0;
  std::uint64_t servers = 0;
};

struct Fixture {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> client;
  std::uint64_t connections = 0;  // on this server
  Totals done;                    // servers already retired
};

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tcp_store_fuzz: %s\n", what);
  std::abort();
}

void StartServer(Fixture& fx) {
  fx.client.reset();
  fx.server.reset();
  TcpStoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.token = kToken;
  auto server = TcpStoreServer::Start(so);
  if (!server.ok()) Fail(server.status().ToString().c_str());
  fx.server = std::move(server).value();
  TcpStoreOptions co;
  co.host = "127.0.0.1";
  co.port = fx.server->port();
  co.token = kToken;
  auto client = TcpStore::Create(co);
  if (!client.ok()) Fail(client.status().ToString().c_str());
  fx.client = std::move(client).value();
  fx.connections = 0;
  ++fx.done.servers;
}

void Retire(Fixture& fx) {
  auto s = fx.server->stats();
  fx.done.connections += fx.connections;
  fx.done.requests += s.requests;
  fx.done.protocol_errors += s.protocol_errors;
  fx.done.rejected_handshakes += s.rejected_handshakes;
}

Fixture& GetFixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    StartServer(*fx);
    std::atexit([] {
      Fixture& fx = GetFixture();
      Totals t = fx.done;
      auto s = fx.server->stats();
      t.connections += fx.connections;
      t.requests += s.requests;
      t.protocol_errors += s.protocol_errors;
      t.rejected_handshakes += s.rejected_handshakes;
      std::fprintf(stderr,
                   "tcp_store_fuzz totals: connections=%llu requests=%lld protocol_errors=%lld "
                   "rejected_handshakes=%lld servers=%llu\n",
                   static_cast<unsigned long long>(t.connections), static_cast<long long>(t.requests),
                   static_cast<long long>(t.protocol_errors), static_cast<long long>(t.rejected_handshakes),
                   static_cast<unsigned long long>(t.servers));
    });
    return fx;
  }();
  return *f;
}

// Waits for `events` on fd until the deadline; EINTR is retried. False when the deadline passed.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    struct pollfd p {fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) Fail(std::strerror(errno));
  }
}

int Connect(int port, Clock::time_point deadline) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      std::fprintf(stderr, "tcp_store_fuzz: connect: %s\n", std::strerror(errno));
      std::abort();
    }
    if (!WaitFor(fd, POLLOUT, deadline)) Fail("connect to the store server did not complete within 10 s");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      std::fprintf(stderr, "tcp_store_fuzz: connect: %s\n", std::strerror(err));
      std::abort();
    }
  }
  return fd;
}

// Sends until done or the server stops reading/closes (a rejected frame: fine).
void SendSome(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd, POLLOUT, deadline)) return;  // the server holds back a client that does not read
      continue;
    }
    return;
  }
}

// Reads until the server closes; aborts if it has not within the deadline.
void DrainUntilClosed(int fd, Clock::time_point deadline) {
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      std::fprintf(stderr, "tcp_store_fuzz: recv: %s\n", std::strerror(errno));
      std::abort();
    }
    if (!WaitFor(fd, POLLIN, deadline)) Fail("the server did not close a half-closed connection within 10 s");
  }
}

void FuzzCodec(std::string_view data) {
  tcp_store::Reader r(data);
  while (!r.empty()) {
    auto tag = r.U8();
    if (!tag) break;
    bool ok = true;
    switch (*tag % 4) {
      case 0: ok = r.Str(TcpStoreLimits::kMaxKeyBytes).has_value(); break;
      case 1: ok = r.List(64, 1024).has_value(); break;
      case 2: ok = r.U64().has_value(); break;
      default: ok = r.U32().has_value(); break;
    }
    if (!ok) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzCodec(input.substr(1));
  Fixture& fx = GetFixture();
  if (fx.connections >= kConnectionsPerServer) {
    Retire(fx);
    StartServer(fx);
  }

  std::string bytes;
  if (data[0] % 4 != 0 && data[0] % 4 != 2) {
    tcp_store::Writer hello;
    hello.data().append(tcp_store::kMagic, 4);
    hello.U16(tcp_store::kVersion);
    hello.U16(0);
    hello.U32(sizeof(kToken) - 1);
    hello.data().append(kToken);
    bytes = std::move(hello.data());
  }
  if (data[0] % 4 == 3) {
    std::string_view rest = input.substr(1);
    while (rest.size() >= 2) {
      std::size_t len = static_cast<std::uint8_t>(rest[0]) | std::size_t{static_cast<std::uint8_t>(rest[1])} << 8;
      rest.remove_prefix(2);
      len = std::min(len, rest.size());
      tcp_store::Writer frame;
      frame.U32(static_cast<std::uint32_t>(len));
      frame.data().append(rest.substr(0, len));
      bytes += frame.data();
      rest.remove_prefix(len);
    }
  } else {
    bytes.append(input.substr(1));
  }

  auto deadline = Clock::now() + kCloseBound;
  int fd = Connect(fx.server->port(), deadline);
  ++fx.connections;
  SendSome(fd, bytes, deadline);
  ::shutdown(fd, SHUT_WR);
  DrainUntilClosed(fd, deadline);
  ::close(fd);

  // The server must keep serving well-behaved clients.
  if (fx.connections % 64 == 0) {
    auto value = fx.client->Add("__fuzz_alive", 1);
    if (!value.ok()) Fail(StrCat("the server stopped answering: ", value.status().ToString()).c_str());
  }
  return 0;
}
