// Model and path classification on topologies built in code (2-socket PCIe box with switches,
// 8-GPU NVSwitch box, P2P-less box with explicit capabilities).
#include <gtest/gtest.h>

#include "commkit/common/strings.h"
#include "commkit/topology/model.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

NodeId AddCpu(Topology& t, int numa) {
  Node n;
  n.kind = NodeKind::kCpu;
  n.cpu.numa_id = numa;
  n.label = StrCat("CPU", numa);
  return t.AddNode(n);
}

NodeId AddPci(Topology& t, NodeKind kind, NodeId parent, std::string bus, int gen = 4, int width = 16) {
  Node n;
  n.kind = kind;
  n.parent = parent;
  n.pci.bus_id = std::move(bus);
  n.pci.link.gen = gen;
  n.pci.link.width = width;
  return t.AddNode(n);
}

NodeId AddGpu(Topology& t, NodeId parent, int index, std::string bus, int sm = 80) {
  NodeId id = AddPci(t, NodeKind::kGpu, parent, std::move(bus));
  t.node(id).gpu.index = index;
  t.node(id).gpu.sm = sm;
  return id;
}

NodeId AddNic(Topology& t, NodeId parent, std::string name, std::string bus) {
  NodeId id = AddPci(t, NodeKind::kNic, parent, std::move(bus));
  t.node(id).nic.name = std::move(name);
  t.node(id).nic.kind = NicKind::kInfiniBand;
  return id;
}

// CPU0: switch S0 {GPU0, GPU1, NIC mlx5_0}, switch S1 -> S2 {GPU2}; CPU1: GPU3 directly.
Topology PcieBox() {
  Topology t;
  NodeId c0 = AddCpu(t, 0), c1 = AddCpu(t, 1);
  NodeId s0 = AddPci(t, NodeKind::kPciSwitch, c0, "0000:10:00.0");
  NodeId s1 = AddPci(t, NodeKind::kPciSwitch, c0, "0000:20:00.0");
  NodeId s2 = AddPci(t, NodeKind::kPciSwitch, s1, "0000:21:00.0", 3, 16);
  AddGpu(t, s0, 0, "0000:11:00.0");
  AddGpu(t, s0, 1, "12:00.0");
  AddGpu(t, s2, 2, "00000000:22:00.0");
  AddGpu(t, c1, 3, "0000:81:00.0");
  AddNic(t, s0, "mlx5_0", "0000:13:00.0");
  Link smp;
  smp.kind = LinkKind::kSmp;
  smp.a = c0;
  smp.b = c1;
  smp.bandwidth_gbps = 20;
  t.AddLink(smp);
  return t;
}

TEST(ModelTest, LookupsAndCanonicalBusIds) {
  Topology t = PcieBox();
  COMMKIT_ASSERT_OK(t.Validate());
  EXPECT_EQ(t.GpuCount(), 4u);
  EXPECT_EQ(t.NicCount(), 1u);
  ASSERT_TRUE(t.FindByBusId("0000:12:00.0").has_value());
  EXPECT_EQ(t.node(*t.FindByBusId("12:00.0")).gpu.index, 1);
  EXPECT_EQ(t.node(*t.FindByBusId("0000:22:00.0")).gpu.index, 2);
  EXPECT_EQ(CanonicalBusId("00000000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(CanonicalBusId("not a bus"), "not a bus");
  EXPECT_EQ(t.CpuOf(*t.FindGpu(2)), *t.FindCpuByNuma(0));
  EXPECT_TRUE(t.FindNic("mlx5_0").has_value());
  EXPECT_FALSE(t.FindNic("mlx5_9").has_value());
}

TEST(ModelTest, ValidateRejectsDuplicatesAndCycles) {
  Topology t = PcieBox();
  AddGpu(t, kNoNode, 0, "0000:99:00.0");
  EXPECT_EQ(t.Validate().code(), StatusCode::kInvalidArgument);

  Topology c;
  NodeId a = AddPci(c, NodeKind::kPciSwitch, kNoNode, "0000:01:00.0");
  NodeId b = AddPci(c, NodeKind::kPciSwitch, a, "0000:02:00.0");
  c.node(a).parent = b;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_LE(c.Ancestors(a).size(), 3u);
}

TEST(ModelTest, PcieHelpers) {
  EXPECT_EQ(PcieGenFromSpeedString("16 GT/s"), 4);
  EXPECT_EQ(PcieGenFromSpeedString("8.0 GT/s PCIe"), 3);
  EXPECT_EQ(PcieGenFromSpeedString("2.5 GT/s"), 1);
  EXPECT_EQ(PcieGenFromSpeedString("Unknown"), 0);
  PcieLink l{4, 16, 4, 16};
  EXPECT_NEAR(l.BandwidthGBps(), 31.5, 0.1);
  EXPECT_FALSE(l.Degraded());
  PcieLink d{3, 8, 4, 16};
  EXPECT_TRUE(d.Degraded());
}

TEST(PathTest, PcieBoxMatchesNvidiaSmiMeaning) {
  Topology t = PcieBox();
  PathMatrix m = ComputePaths(t);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m.labels()[4], "mlx5_0");
  const char* expected[5][5] = {
      {"X", "PIX", "PHB", "SYS", "PIX"},
      {"PIX", "X", "PHB", "SYS", "PIX"},
      {"PHB", "PHB", "X", "SYS", "PHB"},
      {"SYS", "SYS", "SYS", "X", "SYS"},
      {"PIX", "PIX", "PHB", "SYS", "X"},
  };
  for (std::size_t i = 0; i < 5; ++i) {
    for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(m.at(i, j).Label(), expected[i][j]) << i << "," << j;
  }
  EXPECT_TRUE(m.at(0, 1).p2p);
  EXPECT_FALSE(m.at(0, 2).p2p);
  EXPECT_FALSE(m.at(0, 3).p2p);
  EXPECT_TRUE(m.at(0, 4).gdr);
  EXPECT_FALSE(m.at(2, 4).gdr);
  EXPECT_NEAR(m.at(0, 1).bandwidth_gbps, 31.5, 0.1);
  EXPECT_NEAR(m.at(0, 2).bandwidth_gbps, 15.75, 0.1);  // Gen3 x16 switch link is the bottleneck
  EXPECT_NEAR(m.at(0, 3).bandwidth_gbps, 20.0, 0.1);   // inter-socket link
}

TEST(PathTest, NestedSwitchesArePxbAndHostBridgesGiveNode) {
  Topology t;
  NodeId c0 = AddCpu(t, 0);
  NodeId hb0 = AddPci(t, NodeKind::kHostBridge, c0, "0000:00:01.0");
  NodeId hb1 = AddPci(t, NodeKind::kHostBridge, c0, "0000:00:02.0");
  NodeId top = AddPci(t, NodeKind::kPciSwitch, hb0, "0000:10:00.0");
  NodeId l = AddPci(t, NodeKind::kPciSwitch, top, "0000:11:00.0");
  NodeId r = AddPci(t, NodeKind::kPciSwitch, top, "0000:12:00.0");
  NodeId g0 = AddGpu(t, l, 0, "0000:13:00.0");
  NodeId g1 = AddGpu(t, r, 1, "0000:14:00.0");
  NodeId g2 = AddGpu(t, hb0, 2, "0000:15:00.0");
  NodeId g3 = AddGpu(t, hb1, 3, "0000:16:00.0");
  COMMKIT_ASSERT_OK(t.Validate());
  EXPECT_EQ(ClassifyPath(t, g0, g1)->Label(), "PXB");
  EXPECT_TRUE(ClassifyPath(t, g0, g1)->p2p);
  EXPECT_EQ(ClassifyPath(t, g0, g2)->Label(), "PHB");
  EXPECT_EQ(ClassifyPath(t, g2, g3)->Label(), "NODE");
  EXPECT_FALSE(ClassifyPath(t, g2, g3)->p2p);
  EXPECT_EQ(ClassifyPath(t, c0, g0).status().code(), StatusCode::kInvalidArgument);
}

TEST(PathTest, NvSwitchBoxIsNv12) {
  Topology t;
  NodeId c0 = AddCpu(t, 0);
  std::vector<NodeId> sw;
  for (int s = 0; s < 6; ++s) {
    sw.push_back(AddPci(t, NodeKind::kNvSwitch, c0, StrCat("0000:c", s, ":00.0")));
  }
  std::vector<NodeId> gpus;
  for (int g = 0; g < 8; ++g) {
    gpus.push_back(AddGpu(t, c0, g, StrCat("0000:", 10 + g, ":00.0")));
    for (NodeId s : sw) {
      Link l;
      l.kind = LinkKind::kNvLink;
      l.a = gpus.back();
      l.b = s;
      l.count = 2;
      t.AddLink(l);
    }
  }
  COMMKIT_ASSERT_OK(t.Validate());
  PathMatrix m = ComputePaths(t);
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t j = 0; j < 8; ++j) {
      EXPECT_EQ(m.at(i, j).Label(), i == j ? "X" : "NV12");
      if (i != j) {
        EXPECT_TRUE(m.at(i, j).p2p);
        EXPECT_NEAR(m.at(i, j).bandwidth_gbps, 300.0, 0.01);
      }
    }
  }
}

TEST(PathTest, OverridesAndExplicitP2pWin) {
  Topology t;
  NodeId c0 = AddCpu(t, 0);
  NodeId s = AddPci(t, NodeKind::kPciSwitch, c0, "0000:10:00.0");
  NodeId g0 = AddGpu(t, s, 0, "0000:11:00.0", 86);
  NodeId g1 = AddGpu(t, s, 1, "0000:12:00.0", 86);
  EXPECT_TRUE(ClassifyPath(t, g0, g1)->p2p);
  t.AddP2pOverride({g0, g1, 'r', "CNS"});
  EXPECT_FALSE(ClassifyPath(t, g0, g1)->p2p);
  EXPECT_TRUE(ClassifyPath(t, g0, g1)->p2p_explicit);
  t.AddPathOverride({g1, g0, "SOC"});
  EXPECT_EQ(ClassifyPath(t, g0, g1)->Label(), "SYS");
  t.AddPathOverride({g0, c0, "PIX"});
  EXPECT_FALSE(t.Validate().ok());
}

TEST(PathTest, ParseLabels) {
  EXPECT_EQ(ParsePathLabel("NV18")->second, 18);
  EXPECT_EQ(ParsePathLabel("SOC")->first, PathType::kSys);
  EXPECT_EQ(ParsePathLabel(" NODE ")->first, PathType::kNode);
  EXPECT_FALSE(ParsePathLabel("NV").ok());
  EXPECT_FALSE(ParsePathLabel("NVx").ok());
  EXPECT_FALSE(ParsePathLabel("").ok());
}

}  // namespace
}  // namespace commkit::topology
