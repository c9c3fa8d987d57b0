#include "commkit/topology/cost_model.h"

#include <gtest/gtest.h>

#include <map>

namespace commkit::topology {
namespace {

ClusterShape EightGpuNodes(int nodes) {
  ClusterShape s;
  s.nodes = nodes;
  s.ranks_per_node = 8;
  s.intra = NVLinkLinkCost(12, 25);             // 300 GB/s
  s.inter = NetworkLinkCost(4 * 100000, true);  // 4x100G EFA-class
  return s;
}

TEST(CostModel, RejectsBadShapes) {
  ClusterShape s;
  s.nodes = 0;
  EXPECT_EQ(CostModel::Create(s).status().code(), StatusCode::kInvalidArgument);
  s.nodes = 2;
  s.ranks_per_node = 2;
  s.intra = DefaultLinkCost(LinkClass::kPCIe);
  EXPECT_FALSE(CostModel::Create(s).ok()) << "inter-node link without bandwidth";
  s.inter = DefaultLinkCost(LinkClass::kNetwork);
  EXPECT_TRUE(CostModel::Create(s).ok());
}

TEST(CostModel, LargeMessageRingBusBandwidthTendsToLinkBandwidth) {
  ClusterShape s;
  s.ranks_per_node = 8;
  s.intra = PCIeLinkCost(4, 16);
  auto m = CostModel::Create(s);
  ASSERT_TRUE(m.ok());
  auto p = *m->Predict(CollectiveAlgorithm::kRing, 8e9);
  EXPECT_NEAR(p.busbw_Bps / s.intra.beta_Bps, 1.0, 0.001);
  EXPECT_LT(p.busbw_Bps, s.intra.beta_Bps);
  // Multi-node ring is limited by the slower (network) link.
  auto mn = CostModel::Create(EightGpuNodes(4));
  ASSERT_TRUE(mn.ok());
  auto q = *mn->Predict(CollectiveAlgorithm::kRing, 16e9);
  EXPECT_NEAR(q.busbw_Bps / mn->shape().inter.beta_Bps, 1.0, 0.001);
}

TEST(CostModel, SmallMessagesAreLatencyDominated) {
  auto m = CostModel::Create(EightGpuNodes(4));
  ASSERT_TRUE(m.ok());
  const double p = 32;
  auto ring = *m->Predict(CollectiveAlgorithm::kRing, 8);
  EXPECT_NEAR(ring.time_s, 2 * (p - 1) * m->shape().inter.alpha_s, 1e-9);
  auto rd = *m->Predict(CollectiveAlgorithm::kRecursiveDoubling, 8);
  EXPECT_LT(rd.time_s, ring.time_s);
  EXPECT_EQ(m->Best(8).algorithm, CollectiveAlgorithm::kRecursiveDoubling);
  // Doubling a tiny message barely changes the time.
  EXPECT_NEAR(m->Predict(CollectiveAlgorithm::kRing, 16)->time_s / ring.time_s, 1.0, 1e-3);
}

TEST(CostModel, CrossoversExistAndAreMonotone) {
  for (int nodes : {1, 2, 4, 16}) {
    auto m = CostModel::Create(EightGpuNodes(nodes));
    ASSERT_TRUE(m.ok());
    auto ranges = m->Choices(8, 8e9);
    ASSERT_GE(ranges.size(), 2u) << nodes << " nodes: small and large sizes need different algorithms";
    EXPECT_EQ(ranges.front().best, CollectiveAlgorithm::kRecursiveDoubling);
    EXPECT_NE(ranges.back().best, CollectiveAlgorithm::kRecursiveDoubling);
    std::map<CollectiveAlgorithm, int> seen;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(++seen[ranges[i].best], 1) << "an algorithm wins two separate ranges";
      if (i > 0) {
        EXPECT_GT(ranges[i].min_bytes, ranges[i - 1].max_bytes);
      }
    }
    // Time grows with size for each algorithm.
    for (auto a : m->Applicable()) {
      double last = 0;
      for (double n = 8; n <= 8e9; n *= 4) {
        double t = m->Predict(a, n)->time_s;
        EXPECT_GT(t, last);
        last = t;
      }
    }
  }
}

TEST(CostModel, HierarchicalBeatsFlatRingAcrossNodesForLargeMessages) {
  ClusterShape s = EightGpuNodes(8);
  s.inter = NetworkLinkCost(100000, false);  // one 100G NIC per node
  auto m = CostModel::Create(s);
  ASSERT_TRUE(m.ok());
  auto hier = *m->Predict(CollectiveAlgorithm::kHierarchical, 1e9);
  auto ring = *m->Predict(CollectiveAlgorithm::kRing, 1e9);
  EXPECT_LT(hier.time_s, ring.time_s);
  EXPECT_EQ(m->Best(1e9).algorithm, CollectiveAlgorithm::kHierarchical);
}

TEST(CostModel, HalvingDoublingFormula) {
  ClusterShape s;
  s.ranks_per_node = 8;
  s.intra = {LinkClass::kSHM, 1e-6, 10e9, "test"};
  auto m = CostModel::Create(s);
  ASSERT_TRUE(m.ok());
  const double n = 64e6;
  // Power of two: 2 log2(p) latency steps, the ring's bandwidth term.
  auto hd = *m->Predict(CollectiveAlgorithm::kHalvingDoubling, n);
  EXPECT_NEAR(hd.time_s, 2 * 3 * 1e-6 + 2 * 7.0 / 8 * n / 10e9, 1e-12);
  auto ring = *m->Predict(CollectiveAlgorithm::kRing, n);
  EXPECT_NEAR(ring.time_s - hd.time_s, (14 - 6) * 1e-6, 1e-12) << "same bandwidth term, fewer steps";
  EXPECT_EQ(m->Best(n).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  // Six ranks: two fold into partners (a whole-buffer exchange each way) and four run the halving.
  s.ranks_per_node = 6;
  auto m6 = CostModel::Create(s);
  ASSERT_TRUE(m6.ok());
  EXPECT_NEAR(m6->Predict(CollectiveAlgorithm::kHalvingDoubling, n)->time_s,
              2 * (1e-6 + n / 10e9) + 2 * 2 * 1e-6 + 2 * 3.0 / 4 * n / 10e9, 1e-12);
  // The fold makes it lose to the ring for large messages, and win for small ones.
  EXPECT_EQ(m6->Best(n).algorithm, CollectiveAlgorithm::kRing);
  EXPECT_LT(m6->Predict(CollectiveAlgorithm::kHalvingDoubling, 4096)->time_s,
            m6->Predict(CollectiveAlgorithm::kRing, 4096)->time_s);
  // Two ranks: the same exchange as the ring.
  s.ranks_per_node = 2;
  auto m2 = CostModel::Create(s);
  ASSERT_TRUE(m2.ok());
  EXPECT_DOUBLE_EQ(m2->Predict(CollectiveAlgorithm::kHalvingDoubling, n)->time_s,
                   m2->Predict(CollectiveAlgorithm::kRing, n)->time_s);
  EXPECT_EQ(ToString(CollectiveAlgorithm::kHalvingDoubling), "halving_doubling");
}

TEST(CostModel, HierarchicalUsesHalvingDoublingBetweenManyNodes) {
  ClusterShape s = EightGpuNodes(16);
  auto m = CostModel::Create(s);
  ASSERT_TRUE(m.ok());
  const auto& ln = m->shape().inter;
  const auto& li = m->shape().intra;
  const double n = 4096;
  const double intra = 2 * (7 * li.alpha_s + 7.0 / 8 * n / li.beta_Bps);
  // 16 nodes: 2*4 latency steps between nodes instead of the ring's 2*15.
  EXPECT_NEAR(m->Predict(CollectiveAlgorithm::kHierarchical, n)->time_s,
              intra + 2 * 4 * ln.alpha_s + 2 * 15.0 / 16 * n / ln.beta_Bps, 1e-12);
}

TEST(CostModel, SingleRankCostsNothing) {
  ClusterShape s;
  auto m = CostModel::Create(s);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Predict(CollectiveAlgorithm::kRing, 1e6)->time_s, 0);
  EXPECT_EQ(m->Predict(CollectiveAlgorithm::kRing, 1e6)->busbw_Bps, 0);
}

// The model times the algorithms it has a formula for and refuses the others by name.
TEST(CostModel, PredictRefusesAlgorithmsWithoutAFormula) {
  auto m = CostModel::Create(EightGpuNodes(2));
  ASSERT_TRUE(m.ok());
  int modelled = 0;
  for (CollectiveAlgorithm a : kCollectiveAlgorithms) {
    auto p = m->Predict(a, 1 << 20);
    EXPECT_EQ(p.ok(), CostModel::Models(a)) << ToString(a);
    if (p.ok()) {
      ++modelled;
      EXPECT_EQ(p->algorithm, a);
      EXPECT_GT(p->time_s, 0) << ToString(a);
    } else {
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(p.status().message().find(ToString(a)), std::string::npos) << p.status().message();
    }
  }
  EXPECT_EQ(modelled, 4);
  for (CollectiveAlgorithm a : m->Applicable()) EXPECT_TRUE(CostModel::Models(a)) << ToString(a);
}

TEST(CostModel, LinkCostDerivations) {
  auto gen4 = PCIeLinkCost(4, 16);
  EXPECT_NEAR(gen4.beta_Bps / 1e9, 16 * 128.0 / 130 / 8 * 16 * 0.8, 1e-6);
  EXPECT_GT(PCIeLinkCost(5, 16).beta_Bps, gen4.beta_Bps);
  EXPECT_GT(gen4.beta_Bps, PCIeLinkCost(4, 8).beta_Bps);
  EXPECT_NEAR(NetworkLinkCost(400000, true).beta_Bps, 0.9 * 50e9, 1);
  EXPECT_LT(NetworkLinkCost(100000, true).alpha_s, NetworkLinkCost(100000, false).alpha_s);
  EXPECT_FALSE(gen4.derivation.empty());
}

TEST(CostModel, HostProfile) {
  auto defaults = ProbeHostProfile({.measure = false});
  EXPECT_EQ(defaults.memcpy_Bps, 5e9);
  HostProfileOptions o;
  o.memcpy_bytes = 4 << 20;
  o.stream_bytes = 8 << 20;
  o.pingpongs = 20;
  auto measured = ProbeHostProfile(o);
  EXPECT_GT(measured.memcpy_Bps, 0);
  EXPECT_GT(measured.loopback_alpha_s, 0);
  EXPECT_GT(measured.loopback_beta_Bps, 0);
  EXPECT_GE(measured.notes.size(), 2u);
  auto m = CostModel::Create(HostShape(measured, 4, /*tcp=*/true));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->shape().intra.link, LinkClass::kLoopback);
  EXPECT_GT(m->Predict(CollectiveAlgorithm::kRing, 1 << 20)->time_s, 0);
  EXPECT_EQ(CostModel::Create(HostShape(measured, 4, false))->shape().intra.link, LinkClass::kSHM);
}

}  // namespace
}  // namespace commkit::topology
