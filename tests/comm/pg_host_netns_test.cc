// The host backend across real network stacks: two network namespaces on the netns lab's bridge
// (tests/support/netns.h) stand in for two hosts, two ranks in each. Within a namespace the ranks use shared memory; between them UCX
// over TCP on the veth (UCX_TLS=tcp), the hierarchical all-reduce and the flat algorithms for the
// rest. Root only (label netns): skipped with the reason otherwise. Uses only the 10.213.0.0/16
// addresses it creates and removes its namespaces whatever happens.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <thread>

#include "commkit/comm/process_group.h"
#include "commkit/comm/tcp_store.h"
#include "gtest/gtest.h"
#include "netns.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

// Two namespace hosts on the lab's bridge ("eth0" 10.213.<net>.1 and .2 in each), and the step a
// forked rank takes to live in one of them.
class TwoHosts {
 public:
  TwoHosts() {
    const int net = static_cast<int>(::getpid() % 200) + 20;
    for (int h = 0; h < 2; ++h) {
      NetnsHost host;
      host.name = h == 0 ? "ha" : "hb";
      host.address = "10.213." + std::to_string(net) + "." + std::to_string(h + 1) + "/24";
      address_[h] = host.address.substr(0, host.address.find('/'));
      ok_ = lab_.AddHost(host, &error_);
      if (!ok_) return;
    }
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string ns(int h) const { return lab_.Namespace(h == 0 ? "ha" : "hb"); }
  const std::string& addr(int h) const { return address_[h]; }
  static std::string iface() { return "eth0"; }

  // Moves the calling (forked, single-threaded) process into host h's namespace and, like `ip netns
  // exec`, gives it that namespace's /sys (UCX lists network devices in /sys/class/net).
  bool Enter(int h) const {
    int fd = ::open(("/var/run/netns/" + ns(h)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool entered = ::setns(fd, CLONE_NEWNET) == 0;
    ::close(fd);
    if (!entered || ::unshare(CLONE_NEWNS) != 0) return false;
    if (::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) return false;
    ::umount2("/sys", MNT_DETACH);
    return ::mount(ns(h).c_str(), "/sys", "sysfs", 0, nullptr) == 0;
  }

 private:
  NetnsLab lab_;
  std::string address_[2], error_;
  bool ok_ = false;
};

int RankBody(ProcessGroup& pg) {
  const int p = pg.size(), me = pg.rank();
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
    std::vector<float> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(me + 1) * static_cast<float>(i % 7);
    auto w = pg.Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum());
    if (!w.ok() || !(*w)->Wait(60s).ok()) return 10;
    const float ranks_sum = static_cast<float>(p * (p + 1) / 2);
    for (std::size_t i = 0; i < n; i += 997)
      if (buf[i] != ranks_sum * static_cast<float>(i % 7)) return 11;
  }
  std::vector<std::int64_t> mine(3, me), all(3 * p, -1);
  auto g = pg.Allgather(mine.data(), all.data(), 3, DataType::kInt64);
  if (!g.ok() || !(*g)->Wait(60s).ok()) return 12;
  for (int q = 0; q < p; ++q)
    if (all[3 * q + 2] != q) return 13;
  std::vector<std::int32_t> b(100000, me == 2 ? 42 : 0);
  auto bc = pg.Broadcast(b.data(), b.size(), DataType::kInt32, 2);
  if (!bc.ok() || !(*bc)->Wait(60s).ok() || b[99999] != 42) return 14;
  return 0;
}

TEST(HostBackendNetns, TwoHostsOverVethAllreduceAllgatherBroadcast) {
  if (std::string why = NetnsUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not create the namespace hosts: " << hosts.error();
  const int kRanks = 4;
  // The store server lives in namespace 0, on its veth address.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t server = ::fork();
  if (server == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int port = -1;
    std::unique_ptr<TcpStoreServer> s;
    if (hosts.Enter(0)) {
      TcpStoreServerOptions so;
      so.host = hosts.addr(0);
      so.port = 0;
      so.token = "netns";
      auto started = TcpStoreServer::Start(so);
      if (started.ok()) {
        s = std::move(started).value();
        port = s->port();
      }
    }
    (void)!::write(fds[1], &port, sizeof port);
    while (true) ::pause();
  }
  int port = -1;
  (void)!::read(fds[0], &port, sizeof port);
  ::close(fds[0]);
  ::close(fds[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{server};
  ASSERT_GT(port, 0) << "store server did not start in " << hosts.ns(0);

  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      const int h = rank / 2;
      int code = 90;
      if (hosts.Enter(h)) {
        ::setenv("COMMKIT_HOST_DOMAIN", hosts.ns(h).c_str(), 1);  // the namespaces share this machine's /dev/shm
        ::setenv("COMMKIT_SOCKET_IFNAME", TwoHosts::iface().c_str(), 1);
        ::setenv("UCX_TLS", "tcp", 1);
        TcpStoreOptions o;
        o.host = hosts.addr(0);
        o.port = port;
        o.token = "netns";
        o.timeout = 60s;
        auto store = TcpStore::Create(o);
        if (store.ok()) {
          auto pg = ProcessGroup::Create(std::shared_ptr<Store>(std::move(store).value()), rank, kRanks,
                                         {.backend = "host", .timeout = std::chrono::seconds(60)});
          if (pg.ok()) {
            code = RankBody(**pg);
          } else {
            std::fprintf(stderr, "rank %d: %s\n", rank, pg.status().ToString().c_str());
            code = 91;
          }
        }
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + 180s;
  for (int rank = 0; rank < kRanks; ++rank) {
    int status = 0;
    while (::waitpid(pids[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ::waitpid(pids[rank], &status, 0);
        ADD_FAILURE() << "rank " << rank << " still running after 180 s: killed";
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " (namespace " << hosts.ns(rank / 2) << ") exited with "
        << (WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
}

}  // namespace
}  // namespace commkit::testing
