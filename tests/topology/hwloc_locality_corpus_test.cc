// hwloc locality on the real lstopo fixtures: NUMA nodes, packages, memory and the NUMA node of every
// GPU/NIC (hand-checked against the files' Package/NUMANode nesting).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "commkit/topology/hwloc.h"
#include "commkit/topology/import.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

struct Merged {
  ProbeReport report;
  HwlocMergeStats stats;
};

// Imports a fixture and merges hwloc's locality into a report holding that topology (what
// `commkit-topo --from FILE.xml show` does).
Merged Load(const std::string& name) {
  Merged m;
  const auto path = *testing::FixturesDir() / "topology" / name;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto t = ImportHwlocXml(text, path.string());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return m;
  m.report.topology = std::move(*t);
  auto s = MergeHwloc(text, m.report, path.string());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) m.stats = *s;
  return m;
}

TEST(HwlocLocalityCorpusTest, XeonTwoNodesWithGpusAndNics) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  Merged m = Load("hwloc_32em64t-2n8c2t-pci-normalio.xml");
  const ProbeReport& r = m.report;
  EXPECT_EQ(r.system.packages, 2);
  ASSERT_EQ(r.numa.size(), 2u);
  EXPECT_EQ(r.numa[0].cpulist, "0-7,16-23");
  EXPECT_EQ(r.numa[1].cpulist, "8-15,24-31");
  EXPECT_EQ(r.numa[1].package, 1);
  EXPECT_GT(r.numa[0].memory_bytes, 30ull << 30);
  EXPECT_EQ(m.stats.nodes_added, 0) << "every device was already imported";
  ASSERT_NE(r.LocalityOf("0000:03:00.0"), nullptr);
  EXPECT_EQ(r.LocalityOf("0000:03:00.0")->numa_id, 0);
  EXPECT_EQ(r.LocalityOf("0000:81:00.0")->numa_id, 1);
  EXPECT_EQ(r.LocalityOf("0000:81:00.0")->cpulist, "8-15,24-31");
  EXPECT_EQ(r.LocalityOf("0000:84:00.0")->numa_id, 1);
}

TEST(HwlocLocalityCorpusTest, DgxTwoHalvesOnTwoSockets) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  Merged m = Load("hwloc_nvidiaDGX2.xml");
  const ProbeReport& r = m.report;
  EXPECT_EQ(r.system.packages, 2);
  ASSERT_EQ(r.numa.size(), 2u);
  int on0 = 0, on1 = 0;
  for (NodeId g : r.topology.Gpus()) {
    const DeviceLocality* l = r.LocalityOf(r.topology.node(g).pci.bus_id);
    ASSERT_NE(l, nullptr);
    on0 += l->numa_id == 0;
    on1 += l->numa_id == 1;
  }
  EXPECT_EQ(on0, 8);
  EXPECT_EQ(on1, 8);
  EXPECT_EQ(r.LocalityOf("0000:34:00.0")->numa_id, 0);
  EXPECT_EQ(r.LocalityOf("0000:b7:00.0")->numa_id, 1);
}

TEST(HwlocLocalityCorpusTest, Power8GpusPerSocket) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  Merged m = Load("hwloc_power8gpudistances.xml");
  const ProbeReport& r = m.report;
  ASSERT_EQ(r.numa.size(), 2u);
  EXPECT_EQ(r.LocalityOf("0002:01:00.0")->numa_id, 0);
  EXPECT_EQ(r.LocalityOf("0003:01:00.0")->numa_id, 0);
  EXPECT_EQ(r.LocalityOf("000a:01:00.0")->numa_id, 1);
  EXPECT_EQ(r.LocalityOf("000b:01:00.0")->numa_id, 1);
  EXPECT_EQ(r.LocalityOf("000b:01:00.0")->source, "hwloc");
}

}  // namespace
}  // namespace commkit::topology
