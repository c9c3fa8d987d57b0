// nvidia-smi topo -m / -p2p fixtures: cells hand-checked from the files; export re-imports to the
// same matrix.
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

std::filesystem::path Dir() { return *testing::FixturesDir() / "topology"; }

std::vector<std::vector<std::string>> Cells(const Topology& t) {
  PathMatrix m = ComputePaths(t);
  std::vector<std::vector<std::string>> out(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    for (std::size_t j = 0; j < m.size(); ++j) out[i].push_back(m.at(i, j).Label());
  }
  return out;
}

TEST(NvsmiCorpusTest, MatricesImportAndRoundTrip) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  struct E {
    const char* file;
    std::size_t gpus, nics;
    std::vector<std::tuple<std::size_t, std::size_t, const char*>> cells;
    const char* cpu_aff0;
  };
  const std::vector<E> table = {
      {"nvidia-smi-topo-m_2gpu-NV2_mlengineering.txt", 2, 0, {{0, 1, "NV2"}, {1, 0, "NV2"}}, "0-23"},
      {"nvidia-smi-topo-m_2gpu-pcie-PHB_mlengineering.txt", 2, 0, {{0, 1, "PHB"}}, "0-11"},
      {"nvidia-smi-topo-m_8gpu-pcie-PIX-PXB-mlx5_lattice-quda-669.txt", 8, 1,
       {{0, 1, "PIX"}, {0, 2, "PXB"}, {0, 4, "SYS"}, {2, 3, "PIX"}, {4, 8, "PHB"}, {0, 8, "SYS"}, {8, 7, "PHB"}}, "0-13"},
      {"nvidia-smi-topo-m_A100-SXM-8gpu_mlengineering.txt", 8, 0, {{0, 7, "NV12"}, {3, 4, "NV12"}}, "0-23"},
  };
  for (const E& e : table) {
    SCOPED_TRACE(e.file);
    auto t = ImportTopologyFile(Dir() / e.file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->GpuCount(), e.gpus);
    EXPECT_EQ(t->NicCount(), e.nics);
    const auto cells = Cells(*t);
    for (const auto& [i, j, label] : e.cells) EXPECT_EQ(cells[i][j], label) << i << "," << j;
    ASSERT_FALSE(t->gpu_affinities().empty());
    EXPECT_EQ(t->gpu_affinities()[0].cpu_affinity, e.cpu_aff0);
    for (bool nic_legend : {true, false}) {
      NvsmiExportOptions o;
      o.nic_legend = nic_legend;
      const std::string text = ExportNvsmiMatrix(*t, o);
      auto again = ImportNvsmiMatrix(text, "export");
      ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << text;
      EXPECT_EQ(Cells(*again), cells) << text;
      EXPECT_EQ(ComputePaths(*again).labels(), ComputePaths(*t).labels());
      ASSERT_EQ(again->gpu_affinities().size(), t->gpu_affinities().size());
      EXPECT_EQ(again->gpu_affinities()[0].numa_affinity, t->gpu_affinities()[0].numa_affinity);
    }
  }
  auto quda = ImportTopologyFile(Dir() / "nvidia-smi-topo-m_8gpu-pcie-PIX-PXB-mlx5_lattice-quda-669.txt");
  ASSERT_TRUE(quda.ok());
  EXPECT_TRUE(quda->FindNic("mlx5_0").has_value());
  const PathMatrix m = ComputePaths(*quda);
  EXPECT_FALSE(m.at(4, 8).gdr);  // PHB: beyond NCCL's default GDR level
  EXPECT_TRUE(m.at(0, 1).p2p);
  EXPECT_TRUE(m.at(0, 2).p2p);
  EXPECT_FALSE(m.at(0, 4).p2p);
}

TEST(NvsmiCorpusTest, P2pMatrices) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto l4 = ImportTopologyFile(Dir() / "nvidia-smi-topo-p2p-r_2xL4-CNS_mlengineering.txt");
  ASSERT_TRUE(l4.ok()) << l4.status().ToString();
  EXPECT_EQ(l4->GpuCount(), 2u);
  ASSERT_EQ(l4->p2p_overrides().size(), 2u);
  EXPECT_EQ(l4->p2p_overrides()[0].status, "CNS");
  EXPECT_EQ(l4->p2p_overrides()[0].mode, 'r');
  auto p = ClassifyPath(*l4, *l4->FindGpu(0), *l4->FindGpu(1));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->p2p);
  EXPECT_TRUE(p->p2p_explicit);

  auto ok8 = ImportTopologyFile(Dir() / "nvidia-smi-topo-p2p-r_8gpu-OK_mlengineering.txt");
  ASSERT_TRUE(ok8.ok()) << ok8.status().ToString();
  EXPECT_EQ(ok8->GpuCount(), 8u);
  EXPECT_EQ(ok8->p2p_overrides().size(), 56u);
  EXPECT_TRUE(ClassifyPath(*ok8, *ok8->FindGpu(2), *ok8->FindGpu(7))->p2p);
}

}  // namespace
}  // namespace commkit::topology
