// Stores shared by several processes (fork): atomic counters and rendezvous across address spaces,
// which exercises FileStore's fcntl locking and TcpStore's per-process clients.
#include <fcntl.h>
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

// Review fix: Add/CompareSet used to block in F_SETLKW without bound when another process held the
// lock (a stopped or hung rank). Taking the lock is now bounded by the store's timeout().
TEST(StoreMultiProcess, FileStoreLockHeldElsewhereTimesOut) {
  TempDir dir;
  auto store = FileStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t holder = ::fork();
  if (holder == 0) {
    int fd = ::open((dir.path() / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fd < 0 || ::fcntl(fd, F_SETLKW, &fl) != 0) ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    ::sleep(4);  // then exits, releasing the lock: bounded even if the store hangs
    ::_exit(0);
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  (*store)->set_timeout(300ms);
  auto added = (*store)->Add("n", 1);
  EXPECT_EQ(added.status().code(), StatusCode::kTimeout) << added.status().ToString();
  EXPECT_NE(added.status().message().find(".lock"), std::string::npos) << added.status().ToString();
  auto swapped = (*store)->CompareSet("n", "", "1");
  EXPECT_EQ(swapped.status().code(), StatusCode::kTimeout) << swapped.status().ToString();
  int status = 0;
  ::waitpid(holder, &status, 0);
  (*store)->set_timeout(10s);
  auto after = (*store)->Add("n", 1);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, 1);
}

}  // namespace
}  // namespace commkit::testing
