// EtcdStore against a real etcd server started on loopback for this test binary.
#include "commkit/comm/etcd_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/common/strings.h"
#include "store_contract.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

int FreePort() {
  auto r = RunCommand("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])'");
  return static_cast<int>(ParseInt(r.output.substr(0, r.output.find('\n'))).value_or(0));
}

// One etcd for the whole binary (starting one takes ~1 s).
class EtcdServer {
 public:
  static EtcdServer& Get() {
    static EtcdServer* server = new EtcdServer();
    return *server;
  }
  bool running() const { return pid_ > 0 && ready_; }
  int port() const { return client_port_; }
  const std::string& why_not() const { return why_not_; }
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  EtcdServer() {
    const char* bin = std::getenv("COMMKIT_ETCD");
    if (bin == nullptr || *bin == '\0') {
      why_not_ = "etcd binary not configured (COMMKIT_WITH_ETCD; apt install etcd-server)";
      return;
    }
    client_port_ = FreePort();
    int peer_port = FreePort();
    std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::string data = (dir_.path() / "data").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::freopen((dir_.path() / "etcd.log").c_str(), "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      ::execl(bin, bin, "--name", "commkit-test", "--data-dir", data.c_str(), "--listen-client-urls", client.c_str(),
              "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
              "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", ("commkit-test=" + peer).c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    EtcdStoreOptions o;
    o.port = client_port_;
    o.request_timeout = 1s;
    for (int i = 0; i < 100 && !ready_; ++i) {
      if (EtcdStore::Connect(o).ok()) ready_ = true;
      else std::this_thread::sleep_for(100ms);
    }
    if (!ready_) why_not_ = "etcd did not start within 10 s (see its log)";
    std::atexit([] { EtcdServer::Get().Stop(); });
  }

  TempDir dir_;
  pid_t pid_ = -1;
  int client_port_ = 0;
  bool ready_ = false;
  std::string why_not_;
};

std::atomic<int> g_prefix{0};

StoreInstance MakeEtcd() {
  auto& server = EtcdServer::Get();
  if (!server.running()) return {nullptr, nullptr, nullptr, server.why_not()};
  EtcdStoreOptions o;
  o.port = server.port();
  o.prefix = "test-" + std::to_string(::getpid()) + "-" + std::to_string(g_prefix++) + "/";
  auto a = EtcdStore::Connect(o);
  auto b = EtcdStore::Connect(o);
  if (!a.ok() || !b.ok()) return {};
  return {std::shared_ptr<Store>(std::move(*a)), std::shared_ptr<Store>(std::move(*b)), nullptr};
}

INSTANTIATE_TEST_SUITE_P(Etcd, StoreContract, ::testing::Values(StoreFactory{"etcd", &MakeEtcd}), PrintStoreFactory);

TEST(EtcdStore, DownServerIsAClearErrorNotAHang) {
  EtcdStoreOptions o;
  o.port = FreePort();  // nothing listens here
  o.request_timeout = 2s;
  auto start = std::chrono::steady_clock::now();
  auto store = EtcdStore::Connect(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("Is etcd running"), std::string::npos) << store.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(EtcdStore, APortThatIsNotEtcdIsAClearError) {
  TcpStoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  auto other = TcpStoreServer::Start(so);
  ASSERT_TRUE(other.ok());
  EtcdStoreOptions o;
  o.port = (*other)->port();
  o.request_timeout = 5s;
  auto store = EtcdStore::Connect(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find("not an HTTP response"), std::string::npos) << store.status().message();
}

TEST(EtcdStore, RendezvousThroughEtcd) {
  auto& server = EtcdServer::Get();
  if (!server.running()) GTEST_SKIP() << server.why_not();
  std::string url = "etcd://127.0.0.1:" + std::to_string(server.port()) + "/rdzv-" + std::to_string(::getpid());
  constexpr int kRanks = 3;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      EnvMap env{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(kRanks)}, {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "1"}, {"COMMKIT_STORE", url}, {"TORCHELASTIC_RUN_ID", "etcdjob"}};
      RendezvousOptions ro;
      ro.timeout = 20s;
      auto r = RendezvousFromEnvironment(env, ro);
      if (r.ok() && r->hosts.size() == kRanks) ++ok;
      else ADD_FAILURE() << "rank " << rank << ": " << r.status().ToString();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kRanks);
}


TEST(EtcdStore, AServerThatNeverAnswersIsBoundedByTheRequestTimeout) {
  // A socket that listens but never accepts: connect succeeds (backlog), no reply ever comes.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  EtcdStoreOptions o;
  o.port = ntohs(addr.sin_port);
  o.request_timeout = 500ms;
  auto start = std::chrono::steady_clock::now();
  auto store = EtcdStore::Connect(o);
  auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kTimeout) << store.status().ToString();
  EXPECT_NE(store.status().message().find(std::to_string(o.port)), std::string::npos) << store.status().message();
  EXPECT_LT(took, 30s) << "bounded by the request timeout, not hanging";
}

TEST(EtcdStore, AddOverflowIsAnErrorAndLeavesTheValue) {
  auto& server = EtcdServer::Get();
  if (!server.running()) GTEST_SKIP() << server.why_not();
  EtcdStoreOptions o;
  o.port = server.port();
  o.prefix = "overflow-" + std::to_string(::getpid()) + "/";
  auto store = EtcdStore::Connect(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Set("n", "9223372036854775800").ok());
  auto r = (*store)->Add("n", 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("overflows"), std::string::npos) << r.status().message();
  EXPECT_EQ(*(*store)->Get("n", 1s), "9223372036854775800");
  EXPECT_EQ(*(*store)->Add("n", -800), 9223372036854775000);
}

TEST(EtcdStore, ServerKilledMidSessionIsAClearErrorNotAHang) {
  // A private etcd: killed while a client waits on a key that never comes.
  const char* bin = std::getenv("COMMKIT_ETCD");
  if (bin == nullptr || *bin == '\0') GTEST_SKIP() << "etcd binary not configured";
  TempDir dir;
  int client_port = FreePort(), peer_port = FreePort();
  std::string client = "http://127.0.0.1:" + std::to_string(client_port);
  std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
  std::string data = (dir.path() / "data").string();
  std::string log = (dir.path() / "etcd.log").string();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    std::freopen(log.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    ::execl(bin, bin, "--name", "kill-test", "--data-dir", data.c_str(), "--listen-client-urls", client.c_str(),
            "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
            "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", ("kill-test=" + peer).c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  EtcdStoreOptions o;
  o.port = client_port;
  o.request_timeout = 2s;
  std::unique_ptr<EtcdStore> store;
  for (int i = 0; i < 100 && !store; ++i) {
    auto s = EtcdStore::Connect(o);
    if (s.ok()) store = std::move(*s);
    else std::this_thread::sleep_for(100ms);
  }
  if (!store) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    GTEST_SKIP() << "private etcd did not start within 10 s";
  }
  std::thread killer([pid] {
    std::this_thread::sleep_for(300ms);
    ::kill(pid, SIGKILL);
  });
  auto start = std::chrono::steady_clock::now();
  auto r = store->Get("never", 60s);
  auto took = std::chrono::steady_clock::now() - start;
  killer.join();
  ::waitpid(pid, nullptr, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("Is etcd running"), std::string::npos) << r.status().message();
  EXPECT_LT(took, 50s) << "the wait must end when the server dies, not at its 60 s timeout";
}


TEST(EtcdStore, FallsBackToTheV3betaGatewayOfEtcd33) {
  // A fake etcd 3.3: 404 on /v3/, an empty range answer on /v3beta/.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::vector<std::string> paths;
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) return;
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<std::size_t>(n));
      }
      std::string path = request.substr(5, request.find(' ', 5) - 5);
      paths.push_back(path);
      std::string body = path.rfind("/v3/", 0) == 0 ? "404 page not found\n" : "{\"header\":{},\"count\":\"0\"}";
      std::string reply = StrCat(path.rfind("/v3/", 0) == 0 ? "HTTP/1.1 404 Not Found" : "HTTP/1.1 200 OK",
                                 "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
      (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  EtcdStoreOptions o;
  o.port = ntohs(addr.sin_port);
  o.request_timeout = 5s;
  auto store = EtcdStore::Connect(o);
  server.join();
  ::close(fd);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(paths, (std::vector<std::string>{"/v3/kv/range", "/v3beta/kv/range"}));
  EXPECT_NE((*store)->Describe().find("gateway /v3beta/"), std::string::npos) << (*store)->Describe();
}


// A second run on the same prefix (no job id: "run-default") used to pass rendezvous on the first
// run's keys with ranks missing, then hang.
TEST(EtcdStore, AReusedPrefixNeverPassesOnAPreviousRunsKeys) {
  auto& server = EtcdServer::Get();
  if (!server.running()) GTEST_SKIP() << server.why_not();
  std::string url = "etcd://127.0.0.1:" + std::to_string(server.port()) + "/reuse-" + std::to_string(::getpid());
  auto env = [&](int rank) {
    return EnvMap{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"COMMKIT_STORE", url}};
  };
  auto run = [&](std::vector<int> ranks, std::chrono::milliseconds timeout) {
    std::vector<std::thread> threads;
    std::vector<Result<Rendezvous>> out(ranks.size(), Status::Internal("not run"));
    for (std::size_t i = 0; i < ranks.size(); ++i)
      threads.emplace_back([&, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200) * static_cast<int>(i));
        RendezvousOptions ro;
        ro.timeout = timeout;
        out[i] = RendezvousFromEnvironment(env(ranks[i]), ro);
      });
    for (auto& t : threads) t.join();
    return out;
  };
  for (auto& r : run({0, 1}, 20s)) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 1);
  }
  auto alone = run({1}, 1500ms);
  ASSERT_FALSE(alone[0].ok()) << "passed on the previous run's keys";
  EXPECT_NE(alone[0].status().message().find("previous run"), std::string::npos) << alone[0].status().ToString();
  for (auto& r : run({1, 0}, 20s)) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->generation, 2);
  }
}

TEST(EtcdStore, KeysUnderALeaseOutliveTheirTtlOnlyWhileTheClientLives) {
  auto& server = EtcdServer::Get();
  if (!server.running()) GTEST_SKIP() << server.why_not();
  EtcdStoreOptions o;
  o.port = server.port();
  o.prefix = "lease-" + std::to_string(::getpid()) + "/";
  o.lease_ttl = 3s;
  auto leased = EtcdStore::Connect(o);
  ASSERT_TRUE(leased.ok()) << leased.status().ToString();
  EXPECT_NE((*leased)->lease(), 0);
  COMMKIT_ASSERT_OK((*leased)->Set("k", "v"));
  o.lease_ttl = 0s;
  auto reader = EtcdStore::Connect(o);
  ASSERT_TRUE(reader.ok());
  std::this_thread::sleep_for(5s);  // past the TTL: the keep-alive holds it
  EXPECT_TRUE(*(*reader)->Check({"k"}));
  leased->reset();  // the client is gone: no more renewals
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !*(*reader)->Check({"k"});
    if (!gone) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << "the key outlived its lease";
}

}  // namespace
}  // namespace commkit::testing
