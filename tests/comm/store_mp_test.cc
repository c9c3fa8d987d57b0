// Stores shared by several processes (fork): atomic counters and rendezvous across address spaces,
// which exercises FileStore's fcntl locking and TcpStore's per-process clients.
#include <sys/wait.h>
#include <unistd.h>

#include "commkit/comm/file_store.h"
#include "commkit/comm/tcp_store.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;
constexpr int kProcs = 4;
constexpr int kAdds = 50;

// Runs body(rank) in kProcs child processes; returns how many exited 0.
template <typename Body>
int ForkRanks(Body body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kProcs; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(body(rank) ? 0 : 1);
    pids.push_back(pid);
  }
  int ok = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++ok;
  }
  return ok;
}

bool CountAndRendezvous(Store& store, int rank) {
  for (int i = 0; i < kAdds; ++i)
    if (!store.Add("counter", 1).ok()) return false;
  if (!store.Set("arrived/" + std::to_string(rank), "yes").ok()) return false;
  std::vector<std::string> keys;
  for (int r = 0; r < kProcs; ++r) keys.push_back("arrived/" + std::to_string(r));
  return store.Wait(keys, 30s).ok();
}

TEST(StoreMultiProcess, FileStoreCountersAcrossProcesses) {
  TempDir dir;
  int ok = ForkRanks([&](int rank) {
    auto store = FileStore::Open(dir.path());
    return store.ok() && CountAndRendezvous(**store, rank);
  });
  EXPECT_EQ(ok, kProcs);
  auto store = FileStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->Add("counter", 0), kProcs * kAdds);
}

TEST(StoreMultiProcess, TcpStoreCountersAcrossProcesses) {
  TcpStoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.token = "mp";
  auto server = TcpStoreServer::Start(so);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  int ok = ForkRanks([&](int rank) {
    TcpStoreOptions o;
    o.port = port;
    o.token = "mp";
    auto store = TcpStore::Create(o);
    return store.ok() && CountAndRendezvous(**store, rank);
  });
  EXPECT_EQ(ok, kProcs);
  TcpStoreOptions o;
  o.port = port;
  o.token = "mp";
  auto store = TcpStore::Create(o);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->Add("counter", 0), kProcs * kAdds);
}

}  // namespace
}  // namespace commkit::testing
