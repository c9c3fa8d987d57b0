// ProcessGroup's per-call fast path. The call-shape cache (comm/src/pg/validate.h): a call of the same
// shape as the last valid one skips validation, and its fingerprint is the cached shape hash mixed
// with the sequence number. What must hold: any change of a field validation or the cross-rank
// comparison depends on misses the cache; fingerprints differ across sequence numbers and across
// shapes; and through a real group, repeated calls still fail on changed arguments and still detect
// mismatches. And the inline path's lock-free release of the group: threads submitting to one group
// at once (some calls run inline, the others queue for the worker) all complete, none waits forever;
// and every Work says how long its call took, though the backend leaves the timing to the group.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "../../comm/src/pg/validate.h"
#include "commkit/common/config.h"
#include "pg_harness.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

CollectiveArgs AllreduceArgs(void* buf, std::size_t count) {
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllreduce;
  a.send = buf;
  a.recv = buf;
  a.count = count;
  a.dtype = DataType::kFloat32;
  a.op = ReduceOp::Sum();
  return a;
}

TEST(ShapeCache, HitsOnlyTheStoredShape) {
  float buf[8] = {};
  float other[8] = {};
  ShapeCache cache;
  std::uint64_t h = 0;
  const CollectiveArgs base = AllreduceArgs(buf, 4);
  EXPECT_FALSE(cache.Lookup(base, &h)) << "an empty cache hits nothing";
  cache.Store(base, ShapeHash(base));
  ASSERT_TRUE(cache.Lookup(base, &h));
  EXPECT_EQ(h, ShapeHash(base));

  // Other buffers of the same kind (both set, aliasing alike) are the same shape.
  CollectiveArgs moved = base;
  moved.send = moved.recv = other;
  EXPECT_TRUE(cache.Lookup(moved, &h));
  // The sequence number, timeout and stream are not part of the shape.
  moved.sequence = 99;
  moved.timeout = 5s;
  EXPECT_TRUE(cache.Lookup(moved, &h));

  // Every field validation or the fingerprint reads misses.
  std::vector<CollectiveArgs> changed(12, base);
  changed[0].count = 5;
  changed[1].dtype = DataType::kFloat64;
  changed[2].op = ReduceOp::Max();
  changed[3].op = ReduceOp::PreMulSum(2.0);
  changed[4].kind = CollectiveKind::kBroadcast;
  changed[5].root = 1;
  changed[6].peer = 1;
  changed[7].tag = 3;
  changed[8].memory = MemoryKind::kDevice;
  changed[9].recv = nullptr;   // a null receive buffer
  changed[10].send = nullptr;  // in place by null send
  changed[11].send = other;    // no longer in place
  for (std::size_t i = 0; i < changed.size(); ++i) EXPECT_FALSE(cache.Lookup(changed[i], &h)) << "change #" << i;

  // The scalar compares bit for bit: -0.0 is not 0.0 (their fingerprints differ too).
  CollectiveArgs plus = base, minus = base;
  plus.op = ReduceOp::PreMulSum(0.0);
  minus.op = ReduceOp::PreMulSum(-0.0);
  cache.Store(plus, ShapeHash(plus));
  EXPECT_FALSE(cache.Lookup(minus, &h));
  EXPECT_NE(ShapeHash(plus), ShapeHash(minus));
}

TEST(ShapeCache, VCollectivesAreNeverCached) {
  float buf[8] = {};
  ShapeCache cache;
  std::uint64_t h = 0;
  const CollectiveArgs base = AllreduceArgs(buf, 4);
  cache.Store(base, ShapeHash(base));
  for (CollectiveKind kind : {CollectiveKind::kAllgatherv, CollectiveKind::kReduceScatterV, CollectiveKind::kAlltoallv}) {
    CollectiveArgs v = base;
    v.kind = kind;
    v.count = 0;
    v.counts = {1, 2};
    v.recv_counts = {2, 1};
    cache.Store(v, ShapeHash(v));
    EXPECT_FALSE(cache.Lookup(v, &h)) << ToString(kind);
    EXPECT_FALSE(cache.Lookup(base, &h)) << "storing " << ToString(kind) << " forgets the previous shape";
  }
}

TEST(ShapeCache, FingerprintsDifferAcrossSequenceNumbersAndShapes) {
  float buf[8] = {};
  std::vector<CollectiveArgs> shapes;
  for (std::size_t count : {0, 1, 2, 3, 4, 256, 257}) shapes.push_back(AllreduceArgs(buf, count));
  for (ReduceOp op : {ReduceOp::Max(), ReduceOp::Min(), ReduceOp::Avg(), ReduceOp::PreMulSum(0.5)}) {
    shapes.push_back(AllreduceArgs(buf, 4));
    shapes.back().op = op;
  }
  for (int root : {0, 1, 2}) {
    shapes.push_back(AllreduceArgs(buf, 4));
    shapes.back().kind = CollectiveKind::kBroadcast;
    shapes.back().root = root;
  }
  shapes.push_back(AllreduceArgs(buf, 4));
  shapes.back().dtype = DataType::kInt32;
  shapes.push_back(AllreduceArgs(buf, 4));
  shapes.back().kind = CollectiveKind::kAllgatherv;
  shapes.back().counts = {1, 3};
  shapes.push_back(shapes.back());
  shapes.back().counts = {3, 1};
  std::set<std::uint64_t> seen;
  for (const CollectiveArgs& a : shapes) {
    const std::uint64_t shape = ShapeHash(a);
    for (std::uint64_t seq = 1; seq <= 64; ++seq) {
      CollectiveArgs s = a;
      s.sequence = seq;
      const std::uint64_t fp = FingerprintOf(shape, seq);
      EXPECT_EQ(fp, FingerprintHash(s));
      EXPECT_LT(fp, std::uint64_t{1} << 63) << "fingerprints stay positive as int64";
      seen.insert(fp);
    }
  }
  EXPECT_EQ(seen.size(), shapes.size() * 64) << "a fingerprint repeated across shapes or sequence numbers";
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Through a group: after the shape is cached, a call that changes one argument is validated again.
TEST(ShapeCache, RepeatedCallsStillRejectChangedArguments) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<float> buf(4, 1.0f);
    std::uint64_t last = 0;
    for (int i = 0; i < 3; ++i) {
      std::fill(buf.begin(), buf.end(), 1.0f);
      auto w = pg.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum());
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      ASSERT_TRUE((*w)->Wait(30s).ok());
      EXPECT_EQ(buf[3], 2.0f);
      last = (*w)->Sequence();
    }
    auto null_recv = pg.Allreduce(buf.data(), nullptr, buf.size(), DataType::kFloat32, ReduceOp::Sum());
    ASSERT_FALSE(null_recv.ok());
    EXPECT_EQ(null_recv.status().code(), StatusCode::kInvalidArgument) << null_recv.status().ToString();
    auto bitwise = pg.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Band());
    ASSERT_FALSE(bitwise.ok());
    EXPECT_EQ(bitwise.status().code(), StatusCode::kInvalidArgument) << bitwise.status().ToString();

    std::vector<std::int32_t> ints(4, 1);
    for (int i = 0; i < 2; ++i)
      COMMKIT_WAIT_OK_WITHIN(
          pg.Allreduce(ints.data(), ints.data(), ints.size(), DataType::kInt32, ReduceOp::PreMulSum(2.0)), 60s);
    auto fractional = pg.Allreduce(ints.data(), ints.data(), ints.size(), DataType::kInt32, ReduceOp::PreMulSum(2.5));
    ASSERT_FALSE(fractional.ok());
    EXPECT_EQ(fractional.status().code(), StatusCode::kInvalidArgument) << fractional.status().ToString();

    for (int i = 0; i < 2; ++i)
      COMMKIT_WAIT_OK_WITHIN(pg.Broadcast(buf.data(), buf.size(), DataType::kFloat32, 1), 60s);
    for (int root : {2, -1}) {
      auto bad_root = pg.Broadcast(buf.data(), buf.size(), DataType::kFloat32, root);
      ASSERT_FALSE(bad_root.ok()) << "root " << root;
      EXPECT_EQ(bad_root.status().code(), StatusCode::kInvalidArgument) << bad_root.status().ToString();
      EXPECT_TRUE(Contains(bad_root.status().message(), "out of range")) << bad_root.status().ToString();
    }

    // Rejected calls took no sequence number, and the group works on.
    std::fill(buf.begin(), buf.end(), 1.0f);
    auto w = pg.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Wait(30s).ok());
    EXPECT_EQ(buf[0], 2.0f);
    EXPECT_EQ((*w)->Sequence(), last + 2 + 2 + 1);
  });
}

// Mismatch detection on cached shapes: ranks that agreed for several steps, then differ in one field.
void ExpectMismatchAfterAgreement(const std::string& backend) {
  RunRanks(backend, 2, [](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    for (int i = 0; i < 3; ++i)
      COMMKIT_WAIT_OK_WITHIN(
          pg.Allreduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s}), 60s);
    const std::size_t count = pg.rank() == 1 ? 5 : 4;
    auto w = pg.Allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    Status s = (*w)->Wait(30s);
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 1: allreduce f32 sum count=5")) << s.ToString();
  });
  RunRanks(backend, 2, [](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    for (int i = 0; i < 3; ++i)
      COMMKIT_WAIT_OK_WITHIN(
          pg.Allreduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s}), 60s);
    const ReduceOp op = pg.rank() == 0 ? ReduceOp::Sum() : ReduceOp::Max();
    auto w = pg.Allreduce(buf.data(), buf.data(), 4, DataType::kFloat32, op, {.timeout = 20s});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    Status s = (*w)->Wait(30s);
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 1: allreduce f32 max")) << s.ToString();
  });
}

TEST(ShapeCache, AChangeAfterAgreeingStepsIsAMismatchOnTheHostBackend) { ExpectMismatchAfterAgreement("host"); }

#if COMMKIT_HAVE_GLOO
// gloo: ProcessGroup's own check (a MAX all-reduce of the fingerprints before the collective).
TEST(ShapeCache, AChangeAfterAgreeingStepsIsAMismatchOnGloo) { ExpectMismatchAfterAgreement("gloo"); }
#endif

// Same-shape collectives from several threads of each rank: the ranks may pair different threads'
// calls (the shapes and inputs agree, so the results do too), and on each rank the calls that find
// the group busy queue for the worker, which the inline caller must wake when it releases the group.
TEST(FastPath, ThreadsSubmittingToOneGroupAllComplete) {
  constexpr int kThreads = 4;
  constexpr int kCalls = 150;
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        std::vector<float> buf(16);
        for (int i = 0; i < kCalls && failures.load() == 0; ++i) {
          std::fill(buf.begin(), buf.end(), 1.0f);
          auto w = pg.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
          Status s = w.ok() ? (*w)->Wait(30s) : w.status();
          if (!s.ok() || buf[0] != 2.0f || buf[15] != 2.0f) {
            ADD_FAILURE() << "rank " << pg.rank() << " call " << i << ": " << s.ToString() << " result " << buf[0];
            failures.fetch_add(1);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
  });
}

// The group times every call itself and tells the backend so (CollectiveArgs::timed_by_caller), which
// then skips its own clock reads: the Work the caller gets must still say how long the call took,
// whether it ran inline (the backend's Work, re-stamped) or on the worker (above 256 KiB).
TEST(FastPath, EveryWorkReportsItsDuration) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    for (std::size_t count : {std::size_t{4}, std::size_t{1} << 18}) {
      std::vector<float> buf(count, 1.0f);
      for (int i = 0; i < 3; ++i) {
        auto w = pg.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        ASSERT_TRUE((*w)->Wait(30s).ok());
        EXPECT_GT((*w)->Duration().count(), 0) << count << " floats, call " << i;
      }
    }
  });
}

}  // namespace
}  // namespace commkit::testing
