// In-process sweeps: every collective over a 2- and 3-rank gloo group (threads over a HashStore) with
// #wrong == 0, and the verifier catching a collective that returns wrong data.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "commkit/bench/runner.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

struct Outcome {
  Status status;
  std::vector<ResultRow> rows;
};

std::vector<Outcome> RunThreads(int nranks, const BenchOptions& o, const RawCollective* raw = nullptr) {
  auto store = std::make_shared<HashStore>();
  std::vector<Outcome> out(static_cast<std::size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      Outcome& oc = out[static_cast<std::size_t>(r)];
      auto g = ProcessGroup::Create(store, r, nranks, {.backend = "gloo", .timeout = std::chrono::seconds(30)});
      if (!g.ok()) {
        oc.status = g.status();
        return;
      }
      SweepOptions sweep;
      sweep.raw = raw;
      auto rows = RunSweep(**g, o, sweep);
      if (!rows.ok()) {
        oc.status = rows.status();
      } else {
        oc.rows = *rows;
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

BenchOptions Small(BenchCollective c) {
  BenchOptions o;
  o.collective = c;
  o.min_bytes = 8;
  o.max_bytes = 4096;
  o.step_factor = 8;
  o.warmup = 1;
  o.iters = 2;
  o.timeout_s = 30;
  o.out_of_place = Describe(c).has_out_of_place;
  o.in_place = Describe(c).has_in_place;
  return o;
}

TEST(BenchSweep, EveryCollectiveVerifiesOnGloo) {
  for (int nranks : {2, 3}) {
    for (const CollectiveDescriptor& d : AllCollectives()) {
      const BenchOptions o = Small(d.id);
      auto outcomes = RunThreads(nranks, o);
      for (const Outcome& oc : outcomes) ASSERT_TRUE(oc.status.ok()) << d.name << ": " << oc.status.ToString();
      const auto& rows = outcomes[0].rows;
      ASSERT_EQ(rows.size(), 4u) << d.name;  // 8, 64, 512, 4096
      for (const ResultRow& r : rows) {
        SCOPED_TRACE(StrCat(d.name, " ", r.bytes, " B, ", nranks, " ranks"));
        EXPECT_EQ(r.nranks, nranks);
        EXPECT_EQ(r.backend, "gloo");
        for (const Measurement* m : {&r.out_of_place, &r.in_place}) {
          if (!m->valid) continue;
          EXPECT_EQ(m->wrong, 0);
          EXPECT_GT(m->time_us, 0);
        }
        EXPECT_EQ(r.out_of_place.valid, d.has_out_of_place);
        EXPECT_EQ(r.in_place.valid, d.has_in_place);
      }
      // Times are maxima over ranks: every rank reports the same rows.
      EXPECT_EQ(outcomes[1].rows[3].out_of_place.time_us, rows[3].out_of_place.time_us);
    }
  }
}

TEST(BenchSweep, TypesAndOpsVerify) {
  struct Case {
    DataType dtype;
    ReduceOp op;
  };
  for (const Case& c : {Case{DataType::kInt32, ReduceOp::Max()}, Case{DataType::kFloat64, ReduceOp::Prod()},
                        Case{DataType::kFloat16, ReduceOp::Sum()}, Case{DataType::kBFloat16, ReduceOp::Min()},
                        Case{DataType::kInt8, ReduceOp::Sum()}, Case{DataType::kFloat32, ReduceOp::Avg()}}) {
    BenchOptions o = Small(BenchCollective::kAllreduce);
    o.dtype = c.dtype;
    o.op = c.op;
    o.max_bytes = 512;
    auto outcomes = RunThreads(3, o);
    ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status.ToString();
    for (const ResultRow& r : outcomes[0].rows) {
      EXPECT_EQ(r.out_of_place.wrong, 0) << ToString(c.dtype) << " " << c.op.ToString() << " " << r.bytes;
      EXPECT_EQ(r.in_place.wrong, 0) << ToString(c.dtype) << " " << c.op.ToString() << " " << r.bytes;
    }
  }
}

TEST(BenchSweep, VerifierCountsWrongElements) {
  // A "collective" that only copies the local input: correct for no rank of a 2-rank sum.
  RawCollective broken{"broken", [](const void* send, void* recv, const BufferCounts& c) {
                         if (send != recv) std::memcpy(recv, send, c.count * sizeof(float));
                         return Status::Ok();
                       }};
  BenchOptions o = Small(BenchCollective::kAllreduce);
  o.max_bytes = 64;
  auto outcomes = RunThreads(2, o, &broken);
  ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status.ToString();
  const auto& rows = outcomes[0].rows;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].backend, "broken");
  // 8 B = 2 floats per rank, all wrong on both ranks; in-place too.
  EXPECT_EQ(rows[0].out_of_place.wrong, 4);
  EXPECT_EQ(rows[0].in_place.wrong, 4);
  EXPECT_EQ(rows[1].out_of_place.wrong, 32);
  // With -c 0 nothing is checked.
  o.check = false;
  outcomes = RunThreads(2, o, &broken);
  ASSERT_TRUE(outcomes[0].status.ok());
  EXPECT_EQ(outcomes[0].rows[0].out_of_place.wrong, -1);
}

TEST(BenchSweep, RootOutOfRangeIsAnError) {
  BenchOptions o = Small(BenchCollective::kBroadcast);
  o.root = 5;
  auto outcomes = RunThreads(2, o);
  EXPECT_EQ(outcomes[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outcomes[0].status.message().find("-r/--root 5"), std::string::npos);
}

TEST(BenchSweep, ExpectedValuesOfPatterns) {
  BenchOptions o;
  o.collective = BenchCollective::kAllgather;
  BufferCounts c{.send = 2, .recv = 6, .count = 2, .bytes = 24};
  // element 3 of the gathered buffer is element 1 of rank 1.
  EXPECT_EQ(ExpectedValue(o, c, 0, 3, 3, 0), InputValue(o, 1, 1, 0));
  o.collective = BenchCollective::kAlltoall;
  // rank 2's chunk from rank 1 is rank 1's chunk 2.
  EXPECT_EQ(ExpectedValue(o, c, 2, 3, 2, 0), InputValue(o, 1, 4, 0));
  o.collective = BenchCollective::kSendRecv;
  EXPECT_EQ(ExpectedValue(o, c, 0, 3, 1, 7), InputValue(o, 2, 1, 7));
  o.op = ReduceOp::Prod();
  for (int r = 0; r < 4; ++r) {
    for (std::size_t i = 0; i < 8; ++i) {
      const double v = InputValue(o, r, i, 3);
      EXPECT_TRUE(v == 1 || v == 2) << v;
    }
  }
}

}  // namespace
}  // namespace commkit::bench
