// hwloc XML fixtures: devices, switch collapsing, NVLinkBandwidth distances; hand-checked.
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

std::filesystem::path Dir() { return *testing::FixturesDir() / "topology"; }

std::string Label(const Topology& t, NodeId a, NodeId b) {
  auto r = ClassifyPath(t, a, b);
  return r.ok() ? r->Label() : r.status().ToString();
}

TEST(HwlocCorpusTest, DgxTwoIsSixteenGpusNv6ThroughNvSwitches) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto t = ImportTopologyFile(Dir() / "hwloc_nvidiaDGX2.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->GpuCount(), 16u);
  EXPECT_EQ(t->NicCount(), 0u);
  EXPECT_EQ(t->Cpus().size(), 2u);
  EXPECT_EQ(t->NodesOfKind(NodeKind::kNvSwitch).size(), 12u);
  EXPECT_EQ(t->NodesOfKind(NodeKind::kHostBridge).size() >= 2, true);
  const NodeId g0 = *t->FindByBusId("0000:34:00.0"), g1 = *t->FindByBusId("0000:36:00.0");
  const NodeId g2 = *t->FindByBusId("0000:39:00.0");
  EXPECT_EQ(t->node(g0).gpu.index, 0);  // nvml0
  EXPECT_EQ(t->node(g2).gpu.index, 2);  // nvml2
  // Ports collapsed like NCCL: GPU0/GPU1 hang off upstream port 32:00.0, GPU2 off 37:00.0.
  EXPECT_EQ(t->node(g0).parent, t->node(g1).parent);
  EXPECT_EQ(t->node(t->node(g0).parent).pci.bus_id, "0000:32:00.0");
  EXPECT_EQ(t->node(t->node(g2).parent).pci.bus_id, "0000:37:00.0");
  EXPECT_EQ(t->node(t->node(t->node(g0).parent).parent).pci.bus_id, "0000:2c:00.0");
  EXPECT_EQ(t->node(g0).pci.link.gen, 3);
  EXPECT_EQ(t->node(g0).pci.link.width, 16);
  const PathMatrix m = ComputePaths(*t);
  for (std::size_t i = 0; i < 16; ++i) {
    for (std::size_t j = 0; j < 16; ++j) {
      EXPECT_EQ(m.at(i, j).Label(), i == j ? "X" : "NV6") << i << "," << j;
    }
  }
  EXPECT_NEAR(m.at(0, 15).bandwidth_gbps, 150.0, 1e-9);
}

TEST(HwlocCorpusTest, Power8HasNvLinkPairsAndSysAcrossSockets) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto t = ImportTopologyFile(Dir() / "hwloc_power8gpudistances.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->GpuCount(), 4u);
  EXPECT_EQ(t->Cpus().size(), 2u);
  const NodeId g0 = *t->FindGpu(0), g1 = *t->FindGpu(1), g2 = *t->FindGpu(2), g3 = *t->FindGpu(3);
  EXPECT_EQ(Label(*t, g0, g1), "NV2");  // 40000 MB/s = 2 x NVLink1
  EXPECT_EQ(Label(*t, g2, g3), "NV2");
  EXPECT_EQ(Label(*t, g0, g2), "SYS");
  EXPECT_EQ(Label(*t, g1, g3), "SYS");
  EXPECT_EQ(t->node(t->CpuOf(g0)).cpu.numa_id, 0);
  EXPECT_EQ(t->node(t->CpuOf(g3)).cpu.numa_id, 1);
}

TEST(HwlocCorpusTest, PlainServerWithDuplicateBusIdImportsWithNote) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto t = ImportTopologyFile(Dir() / "hwloc_32em64t-2n8c2t-pci-normalio.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // NVIDIA 03:00.0, 83:00.0, 84:00.0 (cuda0); the AMD 84:00.1 display device is not a GPU here.
  EXPECT_EQ(t->GpuCount(), 3u);
  EXPECT_EQ(t->NicCount(), 3u);  // eth0, eth1, mlx5_0 (+ib0)
  const NodeId cuda0 = *t->FindByBusId("0000:84:00.0");
  EXPECT_EQ(t->node(cuda0).gpu.index, 0);
  const NodeId g03 = *t->FindByBusId("0000:03:00.0"), g83 = *t->FindByBusId("0000:83:00.0");
  const NodeId mlx = *t->FindNic("mlx5_0");
  EXPECT_EQ(t->node(mlx).nic.kind, NicKind::kInfiniBand);
  EXPECT_EQ(t->node(*t->FindNic("eth0")).nic.kind, NicKind::kEthernet);
  EXPECT_TRUE(t->FindNic("ib0").has_value());
  EXPECT_EQ(Label(*t, cuda0, g83), "PHB");
  EXPECT_EQ(Label(*t, cuda0, g03), "SYS");
  EXPECT_EQ(Label(*t, cuda0, mlx), "PHB");
  EXPECT_FALSE(ClassifyPath(*t, cuda0, mlx)->gdr);
  bool noted = false;
  for (const auto& n : t->metadata().notes) noted |= n.find("appears twice") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(HwlocCorpusTest, ExportedNcclXmlKeepsPaths) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  for (const char* f : {"hwloc_nvidiaDGX2.xml", "hwloc_power8gpudistances.xml"}) {
    SCOPED_TRACE(f);
    auto a = ImportTopologyFile(Dir() / f);
    ASSERT_TRUE(a.ok());
    auto xml = ExportNcclXml(*a);
    ASSERT_TRUE(xml.ok()) << xml.status().ToString();
    auto b = ImportNcclXml(*xml, "export");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->GpuCount(), a->GpuCount());
    const PathMatrix pa = ComputePaths(*a), pb = ComputePaths(*b);
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      for (std::size_t j = 0; j < pa.size(); ++j) EXPECT_EQ(pa.at(i, j).Label(), pb.at(i, j).Label()) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace commkit::topology
