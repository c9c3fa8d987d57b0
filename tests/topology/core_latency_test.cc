// Core-to-core latency (commkit/topology/core_latency.h): wrong CPUs are refused before any thread
// starts, a measurement between two allowed CPUs is a positive, ordered triple with a handoff rate, and
// the budget bounds the call whatever the round-trip count.
#include <gtest/gtest.h>

#include <chrono>

#include "commkit/topology/core_latency.h"

namespace commkit::topology {
namespace {

TEST(CoreLatency, RefusesCpusItCannotUse) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  auto same = MeasureCoreLatency(allowed[0], allowed[0]);
  ASSERT_FALSE(same.ok());
  EXPECT_EQ(same.status().code(), StatusCode::kInvalidArgument);
  auto outside = MeasureCoreLatency(allowed[0], allowed.back() + 1);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("not one this process may run on"), std::string::npos)
      << outside.status().ToString();
  auto negative = MeasureCoreLatency(-1, allowed[0]);
  EXPECT_FALSE(negative.ok());
  CoreLatencyOptions none;
  none.batches = 0;
  if (allowed.size() >= 2) {
    EXPECT_FALSE(MeasureCoreLatency(allowed[0], allowed[1], none).ok());
  }
}

TEST(CoreLatency, MeasuresTwoCpusWithinItsBudget) {
  const std::vector<int> allowed = AllowedCpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs two CPUs (this process may use " << allowed.size() << ")";
  CoreLatencyOptions quick;
  quick.round_trips = 2000;
  auto r = MeasureCoreLatency(allowed[0], allowed[1], quick);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cpu_a, allowed[0]);
  EXPECT_EQ(r->cpu_b, allowed[1]);
  EXPECT_GT(r->min_ns, 0);
  EXPECT_LE(r->min_ns, r->round_trip_ns);
  EXPECT_LE(r->round_trip_ns, r->max_ns);
  EXPECT_GT(r->handoff_Bps, 1e6);  // 64 KiB blocks between two cores: far above a megabyte per second
  CoreLatencyOptions no_handoff = quick;
  no_handoff.handoff_bytes = 0;
  auto latency_only = MeasureCoreLatency(allowed[0], allowed[1], no_handoff);
  ASSERT_TRUE(latency_only.ok()) << latency_only.status().ToString();
  EXPECT_EQ(latency_only->handoff_Bps, 0);
  // Far more round trips than fit: the budget ends it, with a result from the batches done or a
  // Timeout, never a hang.
  CoreLatencyOptions bounded;
  bounded.round_trips = 1'000'000'000;
  bounded.budget = std::chrono::milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  auto late = MeasureCoreLatency(allowed[0], allowed[1], bounded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kTimeout) << late.status().ToString();
  // The caller's affinity is back as it was.
  EXPECT_EQ(AllowedCpus(), allowed);
}

}  // namespace
}  // namespace commkit::topology
