// commkit-topo on real topologies from the fixture corpus (skips when absent): export --format
// dot|svg, export --format json re-imported with --from, advise on an imported p4d file.
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/json.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace commkit::topology;

TEST(CommkitTopoCliCorpus, ExportDotAndSvgOfRealTopology) {
  auto fixtures = FixturesDir();
  if (!fixtures) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  const auto xml = *fixtures / "topology" / "azhpc-images_ndv4-topo.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << xml << " absent";
  auto topo = ImportTopologyFile(xml);
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  const std::string bin = (BinDir() / "commkit-topo").string() + " --from " + xml.string();
  auto dot = RunCommand(bin + " export --format dot 2>/dev/null");
  ASSERT_EQ(dot.exit_code, 0) << dot.output;
  EXPECT_EQ(dot.output, ExportDot(*topo));
  auto svg = RunCommand(bin + " export --format svg 2>/dev/null");
  ASSERT_EQ(svg.exit_code, 0);
  EXPECT_EQ(svg.output, ExportSvg(*topo));
  EXPECT_GT(svg.output.size(), 1000u);
}

// Every importable fixture: `export --format json -o F` then `--from F matrix` prints the matrix of
// the original file, and F is the model's ExportJson.
TEST(CommkitTopoCliCorpus, ExportJsonReimportsToTheSameMatrix) {
  auto fixtures = FixturesDir();
  if (!fixtures) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  const std::string bin = (BinDir() / "commkit-topo").string();
  TempDir dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(*fixtures / "topology")) {
    const std::string name = entry.path().filename().string();
    if (name == "SOURCES.md" || name.find("graph") != std::string::npos) continue;
    SCOPED_TRACE(name);
    auto topo = ImportTopologyFile(entry.path());
    ASSERT_TRUE(topo.ok()) << topo.status().ToString();
    const auto json = dir.path() / (name + ".json");
    auto e = RunCommand(bin + " --from " + entry.path().string() + " export --format json -o " + json.string());
    ASSERT_EQ(e.exit_code, 0) << e.output;
    auto original = RunCommand(bin + " --from " + entry.path().string() + " matrix");
    auto reimported = RunCommand(bin + " --from " + json.string() + " matrix");
    ASSERT_EQ(original.exit_code, 0) << original.output;
    ASSERT_EQ(reimported.exit_code, 0) << reimported.output;
    EXPECT_EQ(reimported.output, original.output);
    auto loaded = ImportTopologyFile(json);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(ExportJson(*loaded), ExportJson(*topo));
    ++files;
  }
  EXPECT_GE(files, 10);
}

// `commkit-topo --from <p4d NCCL topology XML> advise`: the EFA NICs of the file give the EFA advice.
TEST(CommkitTopoCliCorpus, AdviseOnP4dTopologyFile) {
  auto fixtures = FixturesDir();
  if (!fixtures) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  const auto xml = *fixtures / "topology" / "aws-ofi-nccl_p4d-24xl-topo.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << xml << " absent";
  auto r = RunCommand("env -u FI_PROVIDER -u FI_EFA_USE_DEVICE_RDMA " + (BinDir() / "commkit-topo").string() + " --from " +
                      xml.string() + " advise");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("export FI_PROVIDER=efa\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("export FI_EFA_USE_DEVICE_RDMA=1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 EFA NIC(s) in the imported topology (nccl-xml " + xml.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("aws-ofi-nccl plugin"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("NCCL_P2P_DISABLE"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace commkit::testing
