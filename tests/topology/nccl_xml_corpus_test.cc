// NCCL topology XML fixtures (COMMKIT_FIXTURES_DIR/topology): counts and path types hand-checked
// against each file.
#include <gtest/gtest.h>

#include <map>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

struct Expect {
  const char* file;
  std::size_t gpus, nics, cpus, nvlinks;
  // (gpu a, gpu b, label); NIC endpoints as 100 + nic ordinal.
  std::vector<std::tuple<int, int, const char*>> paths;
};

std::filesystem::path Dir() { return *testing::FixturesDir() / "topology"; }

std::string Label(const Topology& t, int a, int b) {
  auto id = [&](int x) { return x >= 100 ? t.Nics().at(static_cast<std::size_t>(x - 100)) : *t.FindGpu(x); };
  auto r = ClassifyPath(t, id(a), id(b));
  return r.ok() ? r->Label() : r.status().ToString();
}

TEST(NcclXmlCorpusTest, FixturesImportWithExpectedShapeAndPaths) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  const std::vector<Expect> table = {
      {"aws-ofi-nccl_p4d-24xl-topo.xml", 8, 4, 2, 0,
       {{0, 1, "PIX"}, {0, 2, "PHB"}, {0, 4, "SYS"}, {6, 7, "PIX"}, {0, 100, "PIX"}, {2, 100, "PHB"}, {7, 103, "PIX"}}},
      {"aws-ofi-nccl_p4de-24xl-topo.xml", 8, 4, 2, 0, {{0, 1, "PIX"}, {1, 3, "PHB"}, {3, 4, "SYS"}, {4, 102, "PIX"}}},
      {"azhpc-images_ndv4-topo.xml", 8, 8, 4, 0, {{0, 1, "PIX"}, {0, 2, "SYS"}, {0, 100, "PIX"}, {0, 101, "PIX"}, {0, 102, "SYS"}}},
      {"azhpc-images_ndv2-topo.xml", 8, 1, 2, 0, {{0, 1, "PHB"}, {0, 4, "SYS"}, {0, 100, "PHB"}, {5, 100, "SYS"}}},
      {"azhpc-images_ncv4-topo.xml", 4, 1, 4, 0, {{0, 1, "SYS"}, {0, 100, "PHB"}, {3, 100, "SYS"}}},
      {"nccl-dump_8xRTX3090-pcie-only_topo.xml", 8, 1, 2, 0, {{0, 1, "PIX"}, {0, 4, "SYS"}, {4, 100, "PIX"}, {0, 100, "SYS"}}},
      {"aws-ofi-nccl_g5.48xl-topo.xml", 0, 0, 2, 0, {}},
  };
  for (const Expect& e : table) {
    SCOPED_TRACE(e.file);
    auto topo = ImportTopologyFile(Dir() / e.file);
    ASSERT_TRUE(topo.ok()) << topo.status().ToString();
    EXPECT_EQ(topo->GpuCount(), e.gpus);
    EXPECT_EQ(topo->NicCount(), e.nics);
    EXPECT_EQ(topo->Cpus().size(), e.cpus);
    std::size_t nv = 0;
    for (const auto& l : topo->links()) nv += l.kind == LinkKind::kNvLink ? static_cast<std::size_t>(l.count) : 0;
    EXPECT_EQ(nv, e.nvlinks);
    for (const auto& [a, b, label] : e.paths) EXPECT_EQ(Label(*topo, a, b), label) << a << "-" << b;
  }
}

TEST(NcclXmlCorpusTest, DetailsFromFiles) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto p4d = ImportTopologyFile(Dir() / "aws-ofi-nccl_p4d-24xl-topo.xml");
  ASSERT_TRUE(p4d.ok()) << p4d.status().ToString();
  EXPECT_EQ(p4d->node(p4d->Nics()[0]).nic.kind, NicKind::kEfa);
  EXPECT_EQ(p4d->node(*p4d->FindCpuByNuma(1)).cpu.model_id, "85");
  EXPECT_EQ(p4d->node(*p4d->FindGpu(0)).pci.link.gen, 3);
  EXPECT_TRUE(ClassifyPath(*p4d, *p4d->FindGpu(0), p4d->Nics()[0])->gdr);

  auto rtx = ImportTopologyFile(Dir() / "nccl-dump_8xRTX3090-pcie-only_topo.xml");
  ASSERT_TRUE(rtx.ok()) << rtx.status().ToString();
  const NodeId nic = *rtx->FindNic("mlx5_0");
  EXPECT_EQ(rtx->node(nic).nic.kind, NicKind::kInfiniBand);
  EXPECT_NEAR(rtx->node(nic).nic.SpeedGbps(), 56.0, 1e-9);
  EXPECT_FALSE(ClassifyPath(*rtx, *rtx->FindGpu(4), nic)->gdr);  // gdr="0" on both sides
  EXPECT_EQ(rtx->node(*rtx->FindGpu(7)).gpu.sm, 86);

  auto ncv4 = ImportTopologyFile(Dir() / "azhpc-images_ncv4-topo.xml");
  ASSERT_TRUE(ncv4.ok());
  EXPECT_FALSE(ncv4->metadata().notes.empty());  // self-targeted NVLinks are reported, not linked
  EXPECT_EQ(ncv4->node(*ncv4->FindNic("eth0")).nic.kind, NicKind::kEthernet);

  auto graph = ImportTopologyFile(Dir() / "azhpc-images_ncv4-graph.xml");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("graph file"), std::string::npos);
}

TEST(NcclXmlCorpusTest, ExportReimportsToSameModel) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  for (const char* file : {"aws-ofi-nccl_p4d-24xl-topo.xml", "aws-ofi-nccl_p4de-24xl-topo.xml",
                           "azhpc-images_ndv4-topo.xml", "azhpc-images_ndv2-topo.xml", "azhpc-images_ncv4-topo.xml",
                           "nccl-dump_8xRTX3090-pcie-only_topo.xml", "aws-ofi-nccl_g5.48xl-topo.xml"}) {
    SCOPED_TRACE(file);
    auto a = ImportTopologyFile(Dir() / file);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto exported = ExportNcclXml(*a);
    ASSERT_TRUE(exported.ok()) << exported.status().ToString();
    const std::string xml = *exported;
    auto b = ImportNcclXml(xml, "export");
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << xml;
    ASSERT_EQ(a->nodes().size(), b->nodes().size()) << xml;
    for (std::size_t i = 0; i < a->nodes().size(); ++i) {
      const Node& x = a->nodes()[i];
      const Node& y = b->nodes()[i];
      EXPECT_EQ(x.kind, y.kind);
      EXPECT_EQ(x.parent, y.parent);
      EXPECT_EQ(x.pci.bus_id, y.pci.bus_id);
      EXPECT_EQ(x.pci.link.gen, y.pci.link.gen);
      EXPECT_EQ(x.pci.link.width, y.pci.link.width);
      EXPECT_EQ(x.cpu.arch, y.cpu.arch);
      EXPECT_EQ(x.cpu.model_id, y.cpu.model_id);
      EXPECT_EQ(x.gpu.index, y.gpu.index);
      EXPECT_EQ(x.gpu.sm, y.gpu.sm);
      EXPECT_EQ(x.nic.name, y.nic.name);
      EXPECT_EQ(x.nic.kind, y.nic.kind);
      EXPECT_EQ(x.nic.gdr, y.nic.gdr);
    }
    const PathMatrix pa = ComputePaths(*a), pb = ComputePaths(*b);
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      for (std::size_t j = 0; j < pa.size(); ++j) {
        EXPECT_EQ(pa.at(i, j).Label(), pb.at(i, j).Label());
        EXPECT_EQ(pa.at(i, j).gdr, pb.at(i, j).gdr);
      }
    }
    if (!a->Cpus().empty() && !a->node(a->Cpus()[0]).cpu.arch.empty()) {
      EXPECT_NE(xml.find("familyid="), std::string::npos);  // aws-ofi-nccl#785
    }
  }
}

}  // namespace
}  // namespace commkit::topology
