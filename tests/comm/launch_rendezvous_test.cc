// Rendezvous from launcher environments: coexisting with another server on MASTER_PORT, and runs that
// reuse a shared store (file) without passing on the previous run's keys.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tcp_store.h"
#include "test_support.h"

namespace commkit {
namespace {

using namespace std::chrono_literals;

// A listener that accepts and closes at once, like torchrun's TCPStore answering a hello it does not
// understand (or a health checker's port).
class ForeignListener {
 public:
  explicit ForeignListener(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 64) == 0;
    if (ok_) thread_ = std::thread([this] { Serve(); });
  }
  ~ForeignListener() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  void Serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[64];
      (void)!::recv(c, buf, sizeof(buf), MSG_DONTWAIT);
      ::close(c);
    }
  }
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A base port whose next `count` ports are free now (bounded search).
int FreePortRange(int count) {
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    int base = 30000 + static_cast<int>(rng() % 25000);
    bool all_free = true;
    for (int p = base; p < base + count && all_free; ++p) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(p));
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      all_free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      ::close(fd);
    }
    if (all_free) return base;
  }
  return 0;
}

EnvMap RankEnv(int rank, int world, int port, const std::string& extra_key = "", const std::string& extra = "") {
  EnvMap env{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)}, {"COMMKIT_STORE_TOKEN", "launch-test"}};
  if (!extra_key.empty()) env[extra_key] = extra;
  return env;
}

std::vector<Result<Rendezvous>> RunRanks(const std::vector<EnvMap>& envs, std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds stagger = 0ms) {
  std::vector<std::future<Result<Rendezvous>>> futures;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      std::this_thread::sleep_for(stagger * static_cast<int>(i));
      RendezvousOptions o;
      o.timeout = timeout;
      return RendezvousFromEnvironment(envs[i], o);
    }));
  }
  std::vector<Result<Rendezvous>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

int StorePort(const Rendezvous& r) {
  auto* tcp = dynamic_cast<TcpStore*>(r.store.get());
  return tcp != nullptr ? tcp->port() : -1;
}

TEST(LaunchRendezvous, AForeignServerOnMasterPortIsSkippedByEveryRank) {
  int base = FreePortRange(9);
  ASSERT_NE(base, 0);
  ForeignListener foreign(base);
  ASSERT_TRUE(foreign.ok());
  // The clients start first: they must not settle on the foreign server, nor give up.
  auto results = RunRanks({RankEnv(2, 3, base), RankEnv(1, 3, base), RankEnv(0, 3, base)}, 30s, 100ms);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(StorePort(*r), base + 1) << "every rank agrees on MASTER_PORT+1";
    EXPECT_EQ(r->hosts.size(), 3u);
  }
}

// A port can be impossible to bind while nothing listens on it: another program's socket bound
// without listen(), or the local port of an outgoing connection (candidates lie in the ephemeral port
// range). Rank 0 moves past it; the other ranks must not wait there for ever.
TEST(LaunchRendezvous, APortBoundWithoutAListenerIsSkippedByEveryRank) {
  int base = FreePortRange(10);
  ASSERT_NE(base, 0);
  ForeignListener foreign(base);
  ASSERT_TRUE(foreign.ok());
  int held = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(base + 1));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  // The clients start first, as a late rank 0 makes them.
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks({RankEnv(2, 3, base), RankEnv(1, 3, base), RankEnv(0, 3, base)}, 20s, 300ms);
  ::close(held);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(StorePort(*r), base + 2) << "every rank agrees on the first port rank 0 could bind";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

TEST(LaunchRendezvous, TorchrunsAgentStoreIsSkippedWithoutProbing) {
  int base = FreePortRange(9);
  ASSERT_NE(base, 0);
  ForeignListener foreign(base);
  ASSERT_TRUE(foreign.ok());
  auto results = RunRanks({RankEnv(0, 2, base, "TORCHELASTIC_USE_AGENT_STORE", "True"),
                           RankEnv(1, 2, base, "TORCHELASTIC_USE_AGENT_STORE", "True")},
                          30s);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(StorePort(*r), base + 1);
  }
}

TEST(LaunchRendezvous, EveryCandidatePortTakenIsAClearError) {
  int base = FreePortRange(8);
  ASSERT_NE(base, 0);
  std::vector<std::unique_ptr<ForeignListener>> held;
  for (int p = base; p < base + 8; ++p) {
    held.push_back(std::make_unique<ForeignListener>(p));
    ASSERT_TRUE(held.back()->ok());
  }
  RendezvousOptions o;
  o.timeout = 3s;
  auto rank0 = RendezvousFromEnvironment(RankEnv(0, 2, base), o);
  ASSERT_FALSE(rank0.ok());
  EXPECT_NE(rank0.status().message().find("are all in use"), std::string::npos) << rank0.status().ToString();
  EXPECT_NE(rank0.status().message().find("set MASTER_PORT to a free port"), std::string::npos);
  auto start = std::chrono::steady_clock::now();
  auto rank1 = RendezvousFromEnvironment(RankEnv(1, 2, base), o);
  ASSERT_FALSE(rank1.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_NE(rank1.status().message().find("held by another server"), std::string::npos) << rank1.status().ToString();
}

TEST(LaunchRendezvous, AReusedFileStoreNeverPassesOnAPreviousRunsKeys) {
  testing::TempDir dir;
  std::string url = "file://" + dir.path().string();
  auto env = [&](int rank) {
    EnvMap e{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"COMMKIT_STORE", url}};
    return e;
  };
  // Run 1 completes.
  auto first = RunRanks({env(0), env(1)}, 20s);
  for (auto& r : first) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 1);
  }
  // Run 2's rank 1 alone: rank 0's announcement from run 1 is still in the directory. It must wait
  // for this run's rank 0 and say why, not pass.
  RendezvousOptions o;
  o.timeout = 1500ms;
  auto alone = RendezvousFromEnvironment(env(1), o);
  ASSERT_FALSE(alone.ok()) << "passed rendezvous on the previous run's keys";
  EXPECT_EQ(alone.status().code(), StatusCode::kTimeout);
  EXPECT_NE(alone.status().message().find("previous run"), std::string::npos) << alone.status().ToString();
  // Run 2 with rank 1 arriving before rank 0: both meet in a new generation.
  auto second = RunRanks({env(1), env(0)}, 20s, 300ms);
  for (auto& r : second) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 2);
    EXPECT_EQ(r->hosts.size(), 2u);
  }
  // A run of 3 ranks that dies part-way: ranks 0 and 1 announce themselves, rank 2 never comes.
  auto three = [&](int rank) {
    auto e = env(rank);
    e["WORLD_SIZE"] = "3";
    return e;
  };
  auto broken = RunRanks({three(0), three(1)}, 800ms);
  for (auto& r : broken) EXPECT_FALSE(r.ok());
  // The next run's rank 2 arrives first and joins that unfinished generation 3, where ranks 0 and 1
  // already "arrived": it must not pass, and it moves to generation 4 when this run's rank 0 opens it.
  auto next = RunRanks({three(2), three(1), three(0)}, 20s, 300ms);
  for (auto& r : next) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 4);
    EXPECT_EQ(r->hosts.size(), 3u);
  }
}

TEST(LaunchRendezvous, DifferentRunIdsShareAFileStoreWithoutMixing) {
  testing::TempDir dir;
  std::string url = "file://" + dir.path().string();
  std::vector<EnvMap> envs;
  for (const char* id : {"a", "b"})
    for (int rank = 0; rank < 2; ++rank)
      envs.push_back({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"COMMKIT_STORE", url}, {"COMMKIT_RUN_ID", id}});
  auto results = RunRanks(envs, 20s);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 1) << "each run id has its own generations";
  }
}

TEST(LaunchRendezvous, OpenMpiRankZeroAwayFromMpirunsHostIsAClearError) {
  // 192.0.2.1 (TEST-NET-1) is nobody's address: rank 0 cannot be on that "mpirun host".
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_orte_hnp_uri", "1.0;tcp://192.0.2.1:41923"}};
  RendezvousOptions o;
  o.timeout = 2s;
  auto r = RendezvousFromEnvironment(env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 0 is not on mpirun's host 192.0.2.1"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace commkit
