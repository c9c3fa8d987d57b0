// Failure semantics of ProcessGroup (every host-memory backend, ranks as threads): invalid arguments fail locally,
// mismatched collectives are reported on every rank with a per-rank diff, a rank that never arrives
// is named after the timeout, and nothing hangs.
#include <atomic>
#include <thread>

#include "commkit/comm/registry.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

// The same fault suite for every backend of host buffers.
class PgFaults : public ::testing::TestWithParam<std::string> {
 protected:
  std::string backend() const { return GetParam(); }
};

TEST_P(PgFaults, InvalidArgumentsFailBeforeCommunication) {
  RunRanks(backend(), 1, [&](ProcessGroup& pg) {
    float x = 0;
    auto expect_invalid = [](const Result<ProcessGroup::WorkPtr>& r, const std::string& text) {
      ASSERT_FALSE(r.ok()) << text;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
    };
    expect_invalid(pg.Allreduce(nullptr, nullptr, 4, DataType::kFloat32, ReduceOp::Sum()), "receive buffer is null");
    expect_invalid(pg.Broadcast(&x, 1, DataType::kFloat32, 3), "root 3 is out of range for a group of 1 ranks");
    expect_invalid(pg.Allreduce(&x, &x, std::size_t{1} << 62, DataType::kFloat64, ReduceOp::Sum()), "overflows");
    expect_invalid(pg.Allgatherv(&x, &x, {1, 2}, DataType::kFloat32), "counts has 2 entries; the group has 1 ranks");
    expect_invalid(pg.Allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::Bxor()), "bitwise reduction");
    expect_invalid(pg.Send(&x, 1, DataType::kFloat32, 0), "peer 0 is this rank");
    expect_invalid(pg.Allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::PreMulSum(0.5)), "not an integer");
    // No in-place reduce_scatter: a null send buffer is an error (it used to be read through).
    expect_invalid(pg.ReduceScatter(nullptr, &x, 1, DataType::kFloat32, ReduceOp::Sum()),
                   "reduce_scatter: send buffer is null with 1 elements (reduce_scatter has no in-place form)");
    expect_invalid(pg.ReduceScatterV(nullptr, &x, {1}, DataType::kFloat32, ReduceOp::Sum()),
                   "reduce_scatter_v: send buffer is null with 1 elements");
    // In-place alltoallv sending more than the buffer holds.
    expect_invalid(pg.Alltoallv(nullptr, {2}, &x, {1}, DataType::kFloat32),
                   "alltoallv: in place, this rank sends 2 elements but the buffer holds 1");
    auto device = pg.Allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::Sum(), {.memory = MemoryKind::kDevice});
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), StatusCode::kNotSupported);
    EXPECT_NE(device.status().message().find("backend " + backend() + " does not support allreduce of f32 with sum on device memory"),
              std::string::npos)
        << device.status().message();
  });
}

TEST_P(PgFaults, MismatchedCollectivesAreReportedOnEveryRankWithADiff) {
  std::atomic<int> reported{0};
  RunRanks(backend(), 3, [&](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    // Rank 2 passes a different count at the same sequence number.
    std::size_t n = pg.rank() == 2 ? 7 : 8;
    auto work = pg.Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 0: allreduce f32 sum count=8"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 2: allreduce f32 sum count=7"), std::string::npos) << s.message();
    ++reported;
    // The group stays usable after a detected mismatch: nothing was sent.
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Wait());
  });
  EXPECT_EQ(reported.load(), 3);
}

TEST_P(PgFaults, DifferentCollectivesAtTheSameSequenceNumber) {
  RunRanks(backend(), 2, [&](ProcessGroup& pg) {
    std::int64_t v = 1;
    auto work = pg.rank() == 0 ? pg.Broadcast(&v, 1, DataType::kInt64, 0, {.timeout = 20s})
                               : pg.Allreduce(nullptr, &v, 1, DataType::kInt64, ReduceOp::Max(), {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("rank 0: broadcast i64 count=1 root=0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: allreduce i64 max count=1"), std::string::npos) << s.message();
  });
}

TEST_P(PgFaults, ARankThatNeverArrivesIsNamedAfterTheTimeout) {
  auto start = std::chrono::steady_clock::now();
  RunRanks(backend(), 3, [&](ProcessGroup& pg) {
    std::vector<float> buf(16, 1.0f);
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 16, DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 1) {
      std::this_thread::sleep_for(4s);  // "hangs" past the others' timeout, then leaves
      return;
    }
    auto work = pg.Allreduce(nullptr, buf.data(), 16, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 2s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.code() == StatusCode::kTimeout || s.code() == StatusCode::kRemoteError) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("ranks that never reached allreduce #2: 1 (last at #1"), std::string::npos)
        << s.message();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 40s);
}

TEST_P(PgFaults, OperationsCompleteInCallOrderWhetherInlineOrAsynchronous) {
  // A large all-reduce goes to the group's worker; the small ones after it would run on the caller's
  // thread if nothing were ahead of them. They must wait their turn, and every result must be right.
  RunRanks(backend(), 2, [&](ProcessGroup& pg) {
    std::vector<float> big(1 << 20, 1.0f);
    std::vector<std::int32_t> small(4, pg.rank() + 1);
    auto w1 = pg.Allreduce(nullptr, big.data(), big.size(), DataType::kFloat32, ReduceOp::Sum());
    auto w2 = pg.Allreduce(nullptr, small.data(), small.size(), DataType::kInt32, ReduceOp::Sum());
    auto w3 = pg.Allreduce(nullptr, small.data(), small.size(), DataType::kInt32, ReduceOp::Max());
    ASSERT_TRUE(w1.ok() && w2.ok() && w3.ok());
    COMMKIT_ASSERT_OK((*w3)->Wait(60s));
    EXPECT_TRUE((*w1)->Test()) << "an operation completed before one submitted earlier";
    EXPECT_TRUE((*w2)->Test());
    COMMKIT_ASSERT_OK((*w1)->Wait(60s));
    COMMKIT_ASSERT_OK((*w2)->Wait(60s));
    EXPECT_EQ(big[12345], 2.0f);
    EXPECT_EQ(small[3], 3);  // sum 1 + 2, then max over equal values
    EXPECT_LT((*w1)->Sequence(), (*w2)->Sequence());
  });
}

TEST_P(PgFaults, BothPeersMaySendBeforeReceiving) {
  // The usual exchange `s = Send(peer); r = Recv(peer); wait both` on both sides, with messages too
  // large for any eager buffer: sends and receives must progress independently.
  RunRanks(backend(), 2, [&](ProcessGroup& pg) {
    const int peer = 1 - pg.rank();
    std::vector<std::int32_t> out(1 << 20, pg.rank() + 10), in(1 << 20, -1);
    auto s = pg.Send(out.data(), out.size(), DataType::kInt32, peer, 5, {.timeout = 30s});
    auto r = pg.Recv(in.data(), in.size(), DataType::kInt32, peer, 5, {.timeout = 30s});
    ASSERT_TRUE(s.ok() && r.ok());
    COMMKIT_ASSERT_OK((*s)->Wait(60s));
    COMMKIT_ASSERT_OK((*r)->Wait(60s));
    EXPECT_EQ(in.front(), peer + 10);
    EXPECT_EQ(in.back(), peer + 10);
    // Collectives still work next to the point-to-point threads.
    std::int64_t v = 1;
    COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, &v, 1, DataType::kInt64, ReduceOp::Sum()))->Wait(60s));
    EXPECT_EQ(v, 2);
  });
}

TEST_P(PgFaults, SendNobodyWaitsForStillCompletes) {
  // Rank 0 posts a send and makes no further call until rank 1 has received it: the group's own
  // thread must pick the send up (waiters usually run small point-to-point operations themselves).
  std::atomic<bool> received{false};
  RunRanks(backend(), 2, [&](ProcessGroup& pg) {
    std::vector<std::int32_t> buf(1 << 18, pg.rank() == 0 ? 7 : -1);
    if (pg.rank() == 0) {
      auto s = pg.Send(buf.data(), buf.size(), DataType::kInt32, 1, 3, {.timeout = 30s});
      ASSERT_TRUE(s.ok());
      const auto until = std::chrono::steady_clock::now() + 30s;
      while (!received.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      EXPECT_TRUE(received.load()) << "the unwaited send never reached rank 1";
      COMMKIT_EXPECT_OK((*s)->Wait(60s));
    } else {
      auto r = pg.Recv(buf.data(), buf.size(), DataType::kInt32, 0, 3, {.timeout = 30s});
      ASSERT_TRUE(r.ok());
      COMMKIT_EXPECT_OK((*r)->Wait(60s));
      EXPECT_EQ(buf.back(), 7);
      received = true;
    }
  });
}

TEST_P(PgFaults, ShortWaitOnAPendingReceiveReturnsInTime) {
  // A wait shorter than the operation's timeout must not block inside the operation.
  std::atomic<bool> waited{false};
  RunRanks(backend(), 2, [&](ProcessGroup& pg) {
    std::int64_t v = pg.rank() == 0 ? 42 : 0;
    if (pg.rank() == 1) {
      auto r = pg.Recv(&v, 1, DataType::kInt64, 0, 9, {.timeout = 30s});
      ASSERT_TRUE(r.ok());
      const auto t0 = std::chrono::steady_clock::now();
      Status s = (*r)->Wait(20ms);
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "Wait(20ms) blocked in the receive";
      EXPECT_FALSE((*r)->Test());
      waited = true;
      COMMKIT_EXPECT_OK((*r)->Wait(60s));
      EXPECT_EQ(v, 42);
    } else {
      const auto until = std::chrono::steady_clock::now() + 30s;
      while (!waited.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      COMMKIT_EXPECT_OK((*pg.Send(&v, 1, DataType::kInt64, 1, 9, {.timeout = 30s}))->Wait(60s));
    }
  });
}

TEST(PgRegistry, ListsBackendsWithReasons) {
  auto list = Registry::Default().List();
  bool gloo = false;
  for (const auto& b : list) {
    if (b.name == "gloo") gloo = b.available;
    if (!b.available) {
      EXPECT_FALSE(b.reason.empty()) << b.name;
    }
  }
  EXPECT_TRUE(gloo);
  auto store = std::make_shared<HashStore>();
  auto bad = ProcessGroup::Create(store, 0, 1, {.backend = "carrier-pigeon"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown backend 'carrier-pigeon'; known: host, gloo"), std::string::npos)
      << bad.status().message();
}

INSTANTIATE_TEST_SUITE_P(Backends, PgFaults, ::testing::Values("gloo", "host"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace commkit::testing
