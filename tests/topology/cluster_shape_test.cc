// ClusterShapeFromTopology: intra from the slowest GPU pair, inter from the NICs.
#include <gtest/gtest.h>

#include "commkit/topology/cost_model.h"
#include "commkit/topology/model.h"
#include "two_gpu_box.h"

namespace commkit::topology {
namespace {

// CPU - switch - 2 GPUs (+ optional NVLink) + an IB NIC with one port.
Topology Node2(bool nvlink, const std::string& port_state, double nic_gbps) {
  NicPort p;
  p.state = port_state;
  p.link_layer = "InfiniBand";
  p.speed_gbps = nic_gbps;
  return commkit::testing::TwoGpuBox({.nvlink = nvlink, .nic_port = p});
}

TEST(ClusterShape, NvLinkPairAndRdmaNic) {
  ClusterShapeOptions o;
  o.nodes = 4;
  ClusterShape s = ClusterShapeFromTopology(Node2(true, "ACTIVE", 200), o);
  EXPECT_EQ(s.nodes, 4);
  EXPECT_EQ(s.ranks_per_node, 2);
  EXPECT_EQ(s.ranks(), 8);
  EXPECT_EQ(s.intra.link, LinkClass::kNVLink);
  EXPECT_GT(s.intra.beta_Bps, 100e9) << s.intra.derivation;  // NV12 on A100: 300 GB/s
  EXPECT_NE(s.intra.derivation.find("GPU0-GPU1 NV12"), std::string::npos) << s.intra.derivation;
  EXPECT_EQ(s.inter.link, LinkClass::kNetwork);
  EXPECT_DOUBLE_EQ(s.inter.beta_Bps, NetworkLinkCost(200000, true).beta_Bps);
  EXPECT_DOUBLE_EQ(s.inter.alpha_s, NetworkLinkCost(200000, true).alpha_s);
  EXPECT_NE(s.inter.derivation.find("mlx5_0"), std::string::npos);
}

TEST(ClusterShape, PcieOnlyAndDownNicFallsBackToDefaults) {
  ClusterShape s = ClusterShapeFromTopology(Node2(false, "DOWN", 200));
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.intra.link, LinkClass::kPCIe) << s.intra.derivation;
  EXPECT_GT(s.intra.beta_Bps, 0);
  EXPECT_LT(s.intra.beta_Bps, 100e9);
  EXPECT_DOUBLE_EQ(s.inter.beta_Bps, DefaultLinkCost(LinkClass::kNetwork).beta_Bps);
  EXPECT_NE(s.inter.derivation.find("no NIC speed known"), std::string::npos);
}

TEST(ClusterShape, NoGpuIsOneRankOverShm) {
  Topology t;
  ClusterShapeOptions o;
  o.ranks_per_node = 8;
  ClusterShape s = ClusterShapeFromTopology(t, o);
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_EQ(s.intra.link, LinkClass::kSHM);
  EXPECT_EQ(ClusterShapeFromTopology(t).ranks_per_node, 1);
}

}  // namespace
}  // namespace commkit::topology
