// Bandwidth formulas and size conventions against nccl-tests (docs/PERFORMANCE.md there).
#include <gtest/gtest.h>

#include "commkit/bench/collective.h"

namespace commkit::bench {
namespace {

TEST(BenchFormulas, BusFactorsMatchNcclTests) {
  for (int n : {1, 2, 3, 4, 8, 16}) {
    const double nd = n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kAllreduce).bus_factor(n), 2 * (nd - 1) / nd) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kAllgather).bus_factor(n), (nd - 1) / nd) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kReduceScatter).bus_factor(n), (nd - 1) / nd) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kAlltoall).bus_factor(n), (nd - 1) / nd) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kBroadcast).bus_factor(n), 1.0) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kReduce).bus_factor(n), 1.0) << n;
    EXPECT_DOUBLE_EQ(Describe(BenchCollective::kSendRecv).bus_factor(n), 1.0) << n;
  }
}

TEST(BenchFormulas, AlgbwIsBytesOverTimeInGBps) {
  // 1 GB in 0.5 s on 8 ranks: algbw 2 GB/s; allreduce busbw 2 * 2 * 7/8 = 3.5.
  Bandwidth bw = ComputeBandwidth(BenchCollective::kAllreduce, 1'000'000'000, 0.5, 8);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 2.0);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 3.5);
  bw = ComputeBandwidth(BenchCollective::kAllgather, 1'000'000'000, 0.5, 4);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 1.5);
  bw = ComputeBandwidth(BenchCollective::kBroadcast, 1'000'000'000, 0.5, 4);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 2.0);
  // One rank moves nothing over a bus.
  EXPECT_DOUBLE_EQ(ComputeBandwidth(BenchCollective::kAllreduce, 1024, 1e-6, 1).busbw_gbps, 0.0);
  // Non-positive times give zeros, never inf/NaN.
  EXPECT_DOUBLE_EQ(ComputeBandwidth(BenchCollective::kAllreduce, 1024, 0.0, 2).algbw_gbps, 0.0);
}

TEST(BenchFormulas, CountsFollowTheNcclTestsSizeConvention) {
  // allreduce: size / elem.
  BufferCounts c = Describe(BenchCollective::kAllreduce).counts(1024, 4, 3);
  EXPECT_EQ(c.count, 256u);
  EXPECT_EQ(c.send, 256u);
  EXPECT_EQ(c.recv, 256u);
  EXPECT_EQ(c.bytes, 1024u);
  // allgather: size is the gathered buffer, rounded down to a multiple of nranks elements.
  c = Describe(BenchCollective::kAllgather).counts(1024, 4, 3);
  EXPECT_EQ(c.recv, 255u);
  EXPECT_EQ(c.send, 85u);
  EXPECT_EQ(c.count, 85u);
  EXPECT_EQ(c.bytes, 1020u);
  // reduce_scatter: size is the input.
  c = Describe(BenchCollective::kReduceScatter).counts(1024, 4, 4);
  EXPECT_EQ(c.send, 256u);
  EXPECT_EQ(c.recv, 64u);
  EXPECT_EQ(c.count, 64u);
  // alltoall: chunks of size / nranks.
  c = Describe(BenchCollective::kAlltoall).counts(64, 8, 2);
  EXPECT_EQ(c.send, 8u);
  EXPECT_EQ(c.recv, 8u);
  EXPECT_EQ(c.count, 4u);
  // Smaller than one element (or one element per rank): zero elements, zero bytes.
  EXPECT_EQ(Describe(BenchCollective::kAllreduce).counts(2, 4, 2).bytes, 0u);
  EXPECT_EQ(Describe(BenchCollective::kAllgather).counts(4, 4, 2).bytes, 0u);
}

TEST(BenchFormulas, ParseCollectiveAcceptsSpellingsAndListsChoices) {
  EXPECT_EQ(*ParseCollective("allreduce"), BenchCollective::kAllreduce);
  EXPECT_EQ(*ParseCollective("all_reduce"), BenchCollective::kAllreduce);
  EXPECT_EQ(*ParseCollective("Reduce-Scatter"), BenchCollective::kReduceScatter);
  EXPECT_EQ(*ParseCollective("sendrecv"), BenchCollective::kSendRecv);
  auto bad = ParseCollective("allreduse");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("allreduse"), std::string::npos);
  EXPECT_NE(bad.status().message().find("reduce_scatter"), std::string::npos);
}

TEST(BenchFormulas, OneDescriptorPerCollectiveInEnumOrder) {
  auto all = AllCollectives();
  ASSERT_EQ(all.size(), 7u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(all[i].id), i);
    EXPECT_EQ(ToString(all[i].id), all[i].name);
    EXPECT_EQ(*ParseCollective(all[i].name), all[i].id);
  }
}

}  // namespace
}  // namespace commkit::bench
