// commkit-topo export --format dot|svg on a real topology from the fixture corpus (skips when absent).
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
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

}  // namespace
}  // namespace commkit::testing
