// Mismatch detection for backends that check fingerprints on their own communicator with each
// collective (Backend::ChecksMismatchOnCompletion, the NCCL backend's path): no store traffic per
// collective, the verdict arrives with the collective's completion, and the per-rank diff goes through
// the store on the error path only. Exercised on CPU with a backend that behaves like a device
// backend (Run only enqueues; Wait returns at once; Synchronize waits for completion) on top of the
// host backend, whose own all-reduce carries the [w, ~w] MAX check.
#include <atomic>
#include <barrier>
#include <map>
#include <mutex>

#include "commkit/comm/registry.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A store that counts the operations on every key except the progress heartbeat (time-driven, not
// per collective): Set/Get/Add/... one each, MultiGet/MultiSet/Check/Wait one per key.
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::string Describe() const override { return "counting(" + inner_->Describe() + ")"; }
  Status Set(std::string_view k, std::string_view v) override { Count(k); return inner_->Set(k, v); }
  Result<std::string> Get(std::string_view k, std::chrono::milliseconds t) override { Count(k); return inner_->Get(k, t); }
  Result<std::int64_t> Add(std::string_view k, std::int64_t d) override { Count(k); return inner_->Add(k, d); }
  Result<std::string> CompareSet(std::string_view k, std::string_view e, std::string_view d) override {
    Count(k);
    return inner_->CompareSet(k, e, d);
  }
  Result<bool> Check(const std::vector<std::string>& keys) override { CountAll(keys); return inner_->Check(keys); }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    CountAll(keys);
    return inner_->Wait(keys, t);
  }
  Result<bool> Delete(std::string_view k) override { Count(k); return inner_->Delete(k); }
  Result<std::int64_t> NumKeys() override { return inner_->NumKeys(); }
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    CountAll(keys);
    return inner_->MultiGet(keys, t);
  }
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override {
    CountAll(keys);
    return inner_->MultiSet(keys, values);
  }

  std::int64_t ops() const { return ops_.load(); }
  std::int64_t mismatch_ops() const { return mismatch_ops_.load(); }

 private:
  void Count(std::string_view k) {
    if (k.find("progress/") != std::string_view::npos) return;
    ++ops_;
    if (k.find("mismatch/") != std::string_view::npos) ++mismatch_ops_;
  }
  void CountAll(const std::vector<std::string>& keys) {
    for (const auto& k : keys) Count(k);
  }
  std::shared_ptr<Store> inner_;
  std::atomic<std::int64_t> ops_{0}, mismatch_ops_{0};
};

// How the fake device backend ends a collective whose fingerprints differ.
enum class OnDiffer {
  kFailAtCompletion,  // the check's verdict is read when the work completes (NCCL: Poll after the event)
  kHangThenTimeout,   // the collective hangs and times out before the verdict is known
};
std::atomic<OnDiffer> g_on_differ{OnDiffer::kFailAtCompletion};
std::atomic<std::uint64_t> g_timeout_at_seq{0};  // this sequence times out although all ranks agree
std::atomic<int> g_checked_runs{0};              // Run() calls that carried check_fingerprint
std::atomic<bool> g_hold{false};                 // while set, no fake device work completes
std::atomic<int> g_unchecked_device_delay_ms{5};  // completion delay of device work run without a check

// A device work: done `delay` after Run; Wait() only orders (returns at once), Synchronize() blocks.
class FakeDeviceWork final : public Work {
 public:
  FakeDeviceWork(Status final, std::uint64_t seq, std::chrono::milliseconds delay)
      : final_(std::move(final)), seq_(seq), ready_(Clock::now() + delay) {}
  bool Test() override { return !g_hold.load() && Clock::now() >= ready_; }
  Status Wait(std::chrono::milliseconds) override { return Test() ? final_ : Status::Ok(); }
  Status Synchronize(std::chrono::milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    while (!Test()) {
      if (Clock::now() >= until) return Status::Timeout("fake device work: wait timed out");
      std::this_thread::sleep_for(1ms);
    }
    return final_;
  }
  Status status() const override { return !g_hold.load() && Clock::now() >= ready_ ? final_ : Status::Ok(); }
  std::chrono::nanoseconds Duration() const override { return {}; }
  std::uint64_t Sequence() const override { return seq_; }

 private:
  Status final_;
  std::uint64_t seq_;
  Clock::time_point ready_;
};

class FakeDeviceBackend final : public Backend {
 public:
  explicit FakeDeviceBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return "fakedevice"; }
  // "Device" buffers are host memory the inner host backend works on.
  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    return inner_->Supports(kind, dtype, memory == MemoryKind::kDevice ? MemoryKind::kHost : memory, op);
  }
  bool ChecksMismatchOnCompletion() const override { return true; }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& device_args) override {
    CollectiveArgs args = device_args;
    args.memory = MemoryKind::kHost;
    if (!args.check_fingerprint) {
      if (device_args.memory != MemoryKind::kDevice) return inner_->Run(args);
      auto work = inner_->Run(args);
      if (!work.ok()) return work.status();
      Status s = (*work)->Wait(args.timeout);
      return std::unique_ptr<Work>(new FakeDeviceWork(std::move(s), args.sequence,
                                                      std::chrono::milliseconds(g_unchecked_device_delay_ms.load())));
    }
    ++g_checked_runs;
    // The check on the communicator: [w, ~w] MAX over the ranks, through the inner backend's own
    // transport (no store).
    std::int64_t w = static_cast<std::int64_t>(args.fingerprint | (std::uint64_t{1} << 63));
    std::int64_t buf[2] = {w, ~w};
    CollectiveArgs fp;
    fp.kind = CollectiveKind::kAllreduce;
    fp.send = fp.recv = buf;
    fp.count = 2;
    fp.dtype = DataType::kInt64;
    fp.op = ReduceOp::Max();
    fp.timeout = args.timeout;
    fp.sequence = args.sequence;
    auto check = inner_->Run(fp);
    if (!check.ok()) return check.status();
    COMMKIT_RETURN_IF_ERROR((*check)->Wait(args.timeout));
    if (args.sequence == g_timeout_at_seq.load())
      return std::unique_ptr<Work>(new FakeDeviceWork(Status::Timeout("fake: ran past its timeout"), args.sequence, 50ms));
    if (buf[0] != ~buf[1]) {
      // The collective itself is not run: with different sizes it would not be well defined.
      if (g_on_differ.load() == OnDiffer::kHangThenTimeout)
        return std::unique_ptr<Work>(
            new FakeDeviceWork(Status::Timeout("fake: work ran past its timeout"), args.sequence, 200ms));
      return std::unique_ptr<Work>(
          new FakeDeviceWork(Status::Mismatch("fake: the check on the communicator disagreed"), args.sequence, 20ms));
    }
    auto work = inner_->Run(args);
    if (!work.ok()) return work.status();
    Status s = (*work)->Wait(args.timeout);
    return std::unique_ptr<Work>(new FakeDeviceWork(std::move(s), args.sequence, 5ms));
  }
  Result<std::unique_ptr<Backend>> Split(const BackendContext& c, int color, int key) override {
    COMMKIT_ASSIGN_OR_RETURN(auto b, inner_->Split(c, color, key));
    if (b == nullptr) return std::unique_ptr<Backend>();
    return std::unique_ptr<Backend>(new FakeDeviceBackend(std::move(b)));
  }
  void Abort(std::string_view reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Backend> inner_;
};

// The store path's contrast: the host backend without its own check and without host int64 MAX.
class StorePathBackend final : public Backend {
 public:
  explicit StorePathBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return "storepath"; }
  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    if (kind == CollectiveKind::kAllreduce && dtype == DataType::kInt64 && op == ReduceKind::kMax) return false;
    return inner_->Supports(kind, dtype, memory, op);
  }
  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& args) override { return inner_->Run(args); }
  Result<std::unique_ptr<Backend>> Split(const BackendContext&, int, int) override {
    return Status::NotSupported("storepath: no split");
  }
  void Abort(std::string_view reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Backend> inner_;
};

void RegisterFakes() {
  for (std::string name : {"fakedevice", "storepath"}) {
    BackendInfo info;
    info.name = name;
    info.available = true;
    info.create = [name](const BackendContext& ctx) -> Result<std::unique_ptr<Backend>> {
      COMMKIT_ASSIGN_OR_RETURN(auto host, Registry::Default().Create("host", MemoryKind::kHost, ctx));
      if (name == "fakedevice") return std::unique_ptr<Backend>(new FakeDeviceBackend(std::move(host)));
      return std::unique_ptr<Backend>(new StorePathBackend(std::move(host)));
    };
    Registry::Default().Register(std::move(info));
  }
}

// Runs body on `size` thread ranks over one counting store.
void RunCounted(const std::string& backend, int size, CountingStore& store,
                const std::function<void(ProcessGroup&)>& body) {
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = 30s;
  std::shared_ptr<Store> shared(&store, [](Store*) {});
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto pg = ProcessGroup::Create(shared, rank, size, o);
      ASSERT_TRUE(pg.ok()) << pg.status().ToString();
      body(**pg);
    });
  }
  for (auto& t : threads) t.join();
}

// Store operations of `calls` agreeing all-reduces on `ranks` ranks, counted between two barriers.
std::int64_t StoreOpsOfAllreduces(const std::string& backend, int ranks, int calls) {
  CountingStore store(std::make_shared<HashStore>());
  std::barrier sync(ranks);
  std::int64_t before = 0, after = 0;
  RunCounted(backend, ranks, store, [&](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Synchronize(30s));
    sync.arrive_and_wait();
    if (pg.rank() == 0) before = store.ops();
    sync.arrive_and_wait();
    for (int i = 0; i < calls; ++i) {
      std::fill(buf.begin(), buf.end(), 1.0f);
      auto w = pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum());
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      COMMKIT_ASSERT_OK((*w)->Synchronize(30s));
      ASSERT_EQ(buf[0], static_cast<float>(ranks));
    }
    sync.arrive_and_wait();
    if (pg.rank() == 0) after = store.ops();
    sync.arrive_and_wait();
  });
  return after - before;
}

TEST(PgDeferredFingerprint, AgreeingCollectivesCostNoStoreOperations) {
  RegisterFakes();
  constexpr int kRanks = 4, kCalls = 40;
  g_checked_runs = 0;
  const std::int64_t deferred = StoreOpsOfAllreduces("fakedevice", kRanks, kCalls);
  EXPECT_EQ(g_checked_runs.load(), kRanks * (kCalls + 1)) << "every collective carried the check";
  EXPECT_EQ(deferred, 0) << "store operations per collective on the happy path";
  // The store path, for contrast: a Set, an N-key MultiGet and a Delete per collective per rank.
  const std::int64_t via_store = StoreOpsOfAllreduces("storepath", kRanks, kCalls);
  EXPECT_GE(via_store, std::int64_t{kRanks} * kCalls * (kRanks + 1)) << via_store;
}

// The check passes at Submit (nothing waits on the host), and the Work fails at completion with the
// same diff as the store path; the group stays usable.
void ExpectLazyMismatchWithDiff(std::size_t good, std::size_t bad) {
  RegisterFakes();
  g_on_differ = OnDiffer::kFailAtCompletion;
  CountingStore store(std::make_shared<HashStore>());
  std::atomic<int> reported{0};
  std::barrier submitted(3);
  RunCounted("fakedevice", 3, store, [&](ProcessGroup& pg) {
    std::vector<float> buf(std::max(good, bad), 1.0f);
    for (int i = 0; i < 3; ++i)
      COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Synchronize(30s));
    EXPECT_EQ(store.mismatch_ops(), 0);
    const std::size_t n = pg.rank() == 1 ? bad : good;
    submitted.arrive_and_wait();  // every rank is done with its earlier works
    if (pg.rank() == 0) g_hold = true;
    submitted.arrive_and_wait();
    auto work = pg.Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum());
    EXPECT_TRUE(work.ok()) << "a deferred check never fails the submission: " << work.status().ToString();
    if (work.ok()) {
      // Lazy: nothing waited for the verdict; until the device work completes the Work is pending.
      EXPECT_FALSE((*work)->Test());
      EXPECT_TRUE((*work)->status().ok()) << (*work)->status().ToString();
      EXPECT_TRUE((*work)->Wait(1s).ok()) << "Wait only orders device work; the verdict comes with completion";
    }
    submitted.arrive_and_wait();  // no early return above: every rank arrives
    if (pg.rank() == 0) g_hold = false;
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Synchronize(30s);
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #4"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: allreduce f32 sum count=" + std::to_string(bad)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rank 2: allreduce f32 sum count=" + std::to_string(good)), std::string::npos)
        << s.message();
    EXPECT_TRUE((*work)->Test());
    EXPECT_EQ((*work)->status().message(), s.message());
    EXPECT_EQ((*work)->Wait(1s).code(), StatusCode::kMismatch);
    ++reported;
    // A mismatch detected at completion leaves the group usable.
    std::fill(buf.begin(), buf.end(), 1.0f);
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Synchronize(30s));
    EXPECT_EQ(buf[0], 3.0f);
  });
  EXPECT_EQ(reported.load(), 3);
  EXPECT_GT(store.mismatch_ops(), 0) << "the diff went through the store";
}

TEST(PgDeferredFingerprint, MismatchFailsTheWorkAtCompletionWithThePerRankDiff) { ExpectLazyMismatchWithDiff(8, 5); }

// Above COMMKIT_INLINE_BYTES (256 KiB) collectives go through the group's worker thread: the Work it
// hands out completes with the backend's.
TEST(PgDeferredFingerprint, MismatchOfAQueuedCollectiveIsReportedToo) { ExpectLazyMismatchWithDiff(80'000, 70'000); }

TEST(PgDeferredFingerprint, TestNeverBlocksAndEndsWithTheDiff) {
  RegisterFakes();
  g_on_differ = OnDiffer::kFailAtCompletion;
  CountingStore store(std::make_shared<HashStore>());
  RunCounted("fakedevice", 2, store, [&](ProcessGroup& pg) {
    std::int32_t v[4] = {1, 2, 3, 4};
    auto work = pg.Broadcast(v, 4, DataType::kInt32, pg.rank());  // each rank names itself the root
    ASSERT_TRUE(work.ok()) << work.status().ToString();
    const auto until = Clock::now() + 30s;
    while (Clock::now() < until) {
      const auto t0 = Clock::now();
      const bool done = (*work)->Test();
      EXPECT_LT(Clock::now() - t0, 1s) << "Test() blocked";
      if (done) break;
      std::this_thread::sleep_for(2ms);
    }
    Status s = (*work)->status();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("rank 0: broadcast i32 count=4 root=0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: broadcast i32 count=4 root=1"), std::string::npos) << s.message();
  });
}

// The collective hangs before the check's verdict is known (the backend only saw a timeout): the
// ranks compare their calls through the store and report the mismatch; a timeout of agreeing calls
// stays a timeout.
TEST(PgDeferredFingerprint, AHangWithoutAVerdictIsExplainedThroughTheStore) {
  RegisterFakes();
  g_on_differ = OnDiffer::kHangThenTimeout;
  CountingStore store(std::make_shared<HashStore>());
  RunCounted("fakedevice", 3, store, [&](ProcessGroup& pg) {
    std::vector<double> buf(16, 1.0);
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 16, DataType::kFloat64, ReduceOp::Sum()))->Synchronize(30s));
    const ReduceOp op = pg.rank() == 2 ? ReduceOp::Max() : ReduceOp::Sum();
    auto work = pg.Allreduce(nullptr, buf.data(), 16, DataType::kFloat64, op);
    ASSERT_TRUE(work.ok()) << work.status().ToString();
    Status s = (*work)->Synchronize(30s);
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("the collective hung"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 2: allreduce f64 max count=16"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 0: allreduce f64 sum count=16"), std::string::npos) << s.message();
  });
  g_on_differ = OnDiffer::kFailAtCompletion;
}

TEST(PgDeferredFingerprint, ATimeoutOfAgreeingCallsStaysATimeout) {
  RegisterFakes();
  CountingStore store(std::make_shared<HashStore>());
  g_timeout_at_seq = 2;
  RunCounted("fakedevice", 2, store, [&](ProcessGroup& pg) {
    std::vector<float> buf(4, 1.0f);
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::Sum()))->Synchronize(30s));
    auto work = pg.Allreduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::Sum());
    ASSERT_TRUE(work.ok()) << work.status().ToString();
    Status s = (*work)->Synchronize(30s);
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("fake: ran past its timeout"), std::string::npos) << s.message();
  });
  g_timeout_at_seq = 0;
}

// COMMKIT_CHECK_MISMATCH off: the backend is not asked to check.
TEST(PgDeferredFingerprint, NoCheckWhenDisabled) {
  RegisterFakes();
  g_checked_runs = 0;
  auto store = std::make_shared<HashStore>();
  ProcessGroupOptions o;
  o.backend = "fakedevice";
  o.timeout = 30s;
  o.check_mismatch = false;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto pg = ProcessGroup::Create(store, rank, 2, o);
      ASSERT_TRUE(pg.ok()) << pg.status().ToString();
      std::vector<float> buf(4, 1.0f);
      COMMKIT_ASSERT_OK((*(*pg)->Allreduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::Sum()))->Wait(30s));
      EXPECT_EQ(buf[0], 2.0f);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(g_checked_runs.load(), 0);
}

// Device work without a fingerprint check (world size 1, or the check off): the group's Work must be
// the backend's, so Synchronize() waits for the device and Test() says "not yet" meanwhile. The process
// group once returned a completed Work as soon as Wait() had only ordered the stream, and every
// out-of-place result read on the host was 0 (found on an H100, docs/gpu-validation.md). Small
// collectives run inline and larger ones used to go through the worker: both sizes.
TEST(PgDeferredFingerprint, SynchronizeWaitsForUncheckedDeviceWork) {
  RegisterFakes();
  g_unchecked_device_delay_ms = 150;
  ProcessGroupOptions o;
  o.backend = "fakedevice";
  o.timeout = 30s;
  o.memory = MemoryKind::kDevice;
  o.check_mismatch = false;
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, o);
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  for (std::size_t n : {std::size_t{8}, std::size_t{1} << 20}) {
    SCOPED_TRACE(n);
    std::vector<float> in(n, 3.0f), out(n, 0.0f);
    const auto start = Clock::now();
    auto w = (*pg)->Allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::Sum());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_FALSE((*w)->Test()) << "the device work has not completed yet";
    COMMKIT_ASSERT_OK((*w)->Synchronize(10s));
    EXPECT_GE(Clock::now() - start, 120ms) << "Synchronize returned before the device work completed";
    EXPECT_TRUE((*w)->Test());
    EXPECT_EQ(out[n - 1], 3.0f);
  }
  g_unchecked_device_delay_ms = 5;
}

}  // namespace
}  // namespace commkit::testing
