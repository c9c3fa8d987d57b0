// The process group's health pieces (comm/src/pg/health.h): the progress entry, same-host death
// checks (exited, zombie, pid reused, other namespace), the diagnosis naming only ranks that really
// are behind or dead, and bounded time when the store hangs (issues #19, #14).
#include "health.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "commkit/comm/hash_store.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(PgHealth, ProgressEntryRoundTripsAndReadsOlderEntries) {
  RankProgress p = SelfIdentity();
  p.seq = 42;
  p.when = 1700000000123;
  p.failed = 41;
  auto back = ParseProgress(FormatProgress(p));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->seq, 42);
  EXPECT_EQ(back->when, 1700000000123);
  EXPECT_EQ(back->pid, ::getpid());
  EXPECT_EQ(back->start, p.start);
  EXPECT_EQ(back->pid_namespace, p.pid_namespace);
  EXPECT_EQ(back->failed, 41);
  // The two-field entry of older writers: no identity, never judged dead.
  auto old = ParseProgress("7 1700000000000");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->seq, 7);
  EXPECT_EQ(old->pid, 0);
  EXPECT_FALSE(DeadProcess(*old).has_value());
  EXPECT_FALSE(ParseProgress("").has_value());
  EXPECT_FALSE(ParseProgress("x 1").has_value());
}

TEST(PgHealth, DeadProcessSeesExitedZombieAndReusedPids) {
  const RankProgress self = SelfIdentity();
  if (self.pid_namespace.empty()) GTEST_SKIP() << "no /proc boot id or pid namespace here";
  EXPECT_FALSE(DeadProcess(self).has_value()) << "this process is alive";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  // The child's own identity: same namespace, its pid and start time.
  RankProgress c = self;
  c.pid = child;
  c.start = 0;  // unknown start time: only the pid and its state are judged
  EXPECT_FALSE(DeadProcess(c).has_value()) << "a running child is alive";
  ::kill(child, SIGKILL);
  // Killed but not reaped: a zombie, as dead as an exited process.
  std::optional<std::string> dead;
  for (auto until = Clock::now() + 10s; Clock::now() < until && !dead; std::this_thread::sleep_for(10ms))
    dead = DeadProcess(c);
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(Contains(*dead, "zombie")) << *dead;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  dead = DeadProcess(c);
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(Contains(*dead, "exited")) << *dead;
  // A live pid whose start time differs: the rank's process is gone, the pid belongs to another one.
  RankProgress reused = self;
  reused.pid = ::getppid();
  reused.start = 1;
  dead = DeadProcess(reused);
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(Contains(*dead, "exited")) << *dead;
  // Another pid namespace (another container or host): pids say nothing here.
  RankProgress elsewhere = c;
  elsewhere.pid_namespace = "another-boot/pid:[1]";
  EXPECT_FALSE(DeadProcess(elsewhere).has_value());
}

CollectiveArgs Allreduce(std::uint64_t seq) {
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllreduce;
  a.count = 4;
  a.dtype = DataType::kFloat32;
  a.sequence = seq;
  a.timeout = 1s;
  return a;
}

TEST(PgHealth, EveryRankIsInTheStoreOnceConstructed) {
  // Published before the constructor returns, not by the heartbeat thread later: once any collective
  // completed every peer's identity can be read, so a peer killed right after its first collective,
  // taking the store down with it, is still named dead from its cached identity.
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Health>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(std::make_unique<Health>(store, r, 3, "world (rank " + std::to_string(r) + "/3)"));
  auto present = store->Check({"progress/0", "progress/1", "progress/2"});
  ASSERT_TRUE(present.ok()) << present.status().ToString();
  EXPECT_TRUE(*present);
  auto entry = store->Get("progress/2", 100ms);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  auto parsed = ParseProgress(*entry);
  ASSERT_TRUE(parsed.has_value()) << *entry;
  EXPECT_EQ(parsed->pid, SelfIdentity().pid);
  EXPECT_EQ(parsed->seq, 0);
}

TEST(PgHealth, DiagnosisNamesOnlyTheRankThatIsBehind) {
  // Four ranks as Health objects on one store: 1 and 3 entered #2 just now (their first heartbeat
  // after that may come only after the failure), 2 is alive but still at #1.
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Health>> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(std::make_unique<Health>(store, r, 4, "world (rank " + std::to_string(r) + "/4)"));
  for (auto& h : ranks) h->Entered(1);
  std::this_thread::sleep_for(700ms);  // everyone published #1
  ranks[0]->Entered(2);
  ranks[1]->Entered(2);
  ranks[3]->Entered(2);
  const auto start = Clock::now();
  Status s = ranks[0]->Diagnose(Allreduce(2), Status::Timeout("gloo allreduce: timed out"));
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_TRUE(Contains(s.message(), "world (rank 0/4): allreduce #2 (allreduce f32 sum count=4) failed: gloo allreduce: "
                                    "timed out; ranks that never reached allreduce #2: 2 (last at #1)"))
      << s.message();
  for (const char* live : {": 1 (", ", 1 (", ": 3 (", ", 3 ("}) EXPECT_FALSE(Contains(s.message(), live)) << s.message();
  EXPECT_FALSE(Contains(s.message(), "stopped responding")) << s.message();
  EXPECT_LT(took, 2s) << "bounded by the diagnosis budget";
}

TEST(PgHealth, ARankWhoseHeartbeatStoppedIsNamedSilentAndOneThatFailedTooIsNot) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Health>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(std::make_unique<Health>(store, r, 3, "world (rank " + std::to_string(r) + "/3)"));
  for (auto& h : ranks) h->Entered(2);
  std::this_thread::sleep_for(300ms);
  // Rank 1 stops publishing (a hung or dead process on another host: no pid check applies to it,
  // since ranks here are threads of one process); rank 2 reports the same failure.
  ranks[1].reset();
  (void)ranks[2]->Diagnose(Allreduce(2), Status::RemoteError("peer closed"));
  Status s = ranks[0]->Diagnose(Allreduce(2), Status::RemoteError("peer closed"));
  EXPECT_TRUE(Contains(s.message(), "ranks that stopped responding: 1 (inside #2, no heartbeat for")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "dead or hung?")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "ranks that saw allreduce #2 fail too: 2")) << s.message();
  EXPECT_FALSE(Contains(s.message(), ": 2 (") || Contains(s.message(), ", 2 (")) << s.message();
}

// A store whose calls hang once `hang` is set (the store's host is gone and the client keeps
// retrying its connection), each call for `hang_for`.
class HangingStore final : public Store {
 public:
  std::atomic<bool> hang{false};
  std::chrono::milliseconds hang_for{5000};
  std::string Describe() const override { return "hanging store"; }
  Status Set(std::string_view k, std::string_view v) override { return Pause() ? Status::Unavailable("gone") : s_.Set(k, v); }
  using Store::Get;
  Result<std::string> Get(std::string_view k, std::chrono::milliseconds t) override {
    if (Pause()) return Status::Unavailable("gone");
    return s_.Get(k, t);
  }
  Result<std::int64_t> Add(std::string_view k, std::int64_t d) override { return s_.Add(k, d); }
  Result<std::string> CompareSet(std::string_view k, std::string_view e, std::string_view d) override {
    return s_.CompareSet(k, e, d);
  }
  Result<bool> Check(const std::vector<std::string>& keys) override {
    if (Pause()) return Status::Unavailable("gone");
    return s_.Check(keys);
  }
  using Store::Wait;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override { return s_.Wait(keys, t); }
  Result<bool> Delete(std::string_view k) override { return s_.Delete(k); }
  Result<std::int64_t> NumKeys() override { return s_.NumKeys(); }
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    return s_.MultiGet(keys, t);
  }
  Status MultiSet(const std::vector<std::string>& k, const std::vector<std::string>& v) override { return s_.MultiSet(k, v); }

 private:
  bool Pause() {
    if (!hang.load()) return false;
    std::this_thread::sleep_for(hang_for);
    return true;
  }
  HashStore s_;
};

TEST(PgHealth, AHangingStoreBoundsTheDiagnosisAndTheShutdown) {
  auto store = std::make_shared<HangingStore>();
  store->hang_for = 3s;
  auto h = std::make_unique<Health>(store, 0, 2, "world (rank 0/2)");
  auto peer = std::make_unique<Health>(store, 1, 2, "world (rank 1/2)");
  h->Entered(1);
  peer->Entered(1);
  std::this_thread::sleep_for(300ms);
  store->hang = true;
  auto start = Clock::now();
  Status s = h->Diagnose(Allreduce(2), Status::Timeout("timed out"));
  EXPECT_LT(Clock::now() - start, 2s) << s.message();
  EXPECT_TRUE(Contains(s.message(), "the group's store failed (no answer within 800 ms)")) << s.message();
  EXPECT_FALSE(Contains(s.message(), "never reached")) << "what the store said last may be stale: " << s.message();
  // The heartbeat threads are inside a 3 s store call by now (or will be): shutdown does not wait.
  std::this_thread::sleep_for(600ms);
  start = Clock::now();
  h.reset();
  peer.reset();
  EXPECT_LT(Clock::now() - start, 1500ms);
}

}  // namespace
}  // namespace commkit::testing
