// commkit-topo end to end: export --format dot|svg (stdout and -o FILE), errors, prober lines.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "test_support.h"
#include "two_gpu_box.h"

namespace commkit::testing {
namespace {

using namespace commkit::topology;

Topology Box() { return TwoGpuBox(); }

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CommkitTopoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    xml_ = dir_.Write("box.xml", ExportNcclXml(Box())).string();
    auto imported = ImportTopologyFile(xml_);
    ASSERT_TRUE(imported.ok()) << imported.status().ToString();
    topo_ = std::move(*imported);
  }
  std::string Topo(const std::string& args) const { return (BinDir() / "commkit-topo").string() + " --from " + xml_ + " " + args; }

  TempDir dir_;
  std::string xml_;
  Topology topo_;
};

TEST_F(CommkitTopoCli, ExportDotToStdoutMatchesExporter) {
  auto r = RunCommand(Topo("export --format dot 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, ExportDot(topo_));
  EXPECT_EQ(r.output.rfind("graph topology {", 0), 0u);
  EXPECT_NE(r.output.find("NV12"), std::string::npos);
}

TEST_F(CommkitTopoCli, ExportSvgToFile) {
  const auto out = dir_.path() / "topo.svg";
  auto r = RunCommand(Topo("export --format svg -o " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");  // nothing on stdout when writing a file
  const std::string svg = Slurp(out);
  EXPECT_EQ(svg, ExportSvg(topo_));
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST_F(CommkitTopoCli, ExportDotLongOutputOption) {
  const auto out = dir_.path() / "topo.dot";
  ASSERT_EQ(RunCommand(Topo("export --format dot --output " + out.string())).exit_code, 0);
  EXPECT_EQ(Slurp(out), ExportDot(topo_));
}

TEST_F(CommkitTopoCli, UnknownFormatIsUsageError) {
  auto r = RunCommand(Topo("export --format png"));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // CLI11 validation failure -> usage error
}

TEST_F(CommkitTopoCli, UnwritableOutputExits3) {
  auto r = RunCommand(Topo("export --format svg -o " + (dir_.path() / "no" / "such" / "dir.svg").string()));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("cannot write"), std::string::npos);
}

TEST(CommkitTopoCliLive, ShowDoesNotRepeatProberState) {
  auto r = RunCommand((BinDir() / "commkit-topo").string() + " show");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("skipped - skipped"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("failed - failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prober "), std::string::npos) << r.output;
}

// Live show prints NUMA nodes and device locality (from sysfs and hwloc); capture records the hwloc
// facts, and the replay shows the same NUMA/locality lines.
TEST(CommkitTopoCliLive, ShowNumaAndCaptureCarriesHwloc) {
  const std::string bin = (BinDir() / "commkit-topo").string();
  auto live = RunCommand(bin + " show");
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("NUMA:"), std::string::npos) << live.output;
  EXPECT_NE(live.output.find("  node"), std::string::npos) << live.output;
  EXPECT_NE(live.output.find("prober hwloc: "), std::string::npos) << live.output;
  TempDir dir;
  const auto cap = dir.path() / "cap";
  auto c = RunCommand(bin + " capture " + cap.string());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  ASSERT_TRUE(std::filesystem::exists(cap / ".commkit/facts/hwloc")) << c.output;
  const std::string status = Slurp(cap / ".commkit/facts/hwloc");
  if (status.find("\"available\":true") == std::string::npos) GTEST_SKIP() << "hwloc unavailable: " << status;
  EXPECT_NE(Slurp(cap / ".commkit/facts/hwloc.xml").find("<topology"), std::string::npos);
  auto replay = RunCommand(bin + " --from " + cap.string() + " show");
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  auto section = [](const std::string& out) {
    const auto a = out.find("NUMA:"), b = out.find("interfaces:");
    return a == std::string::npos || b == std::string::npos ? std::string() : out.substr(a, b - a);
  };
  EXPECT_FALSE(section(live.output).empty());
  EXPECT_EQ(section(live.output), section(replay.output));
  EXPECT_NE(replay.output.find("prober hwloc: ok"), std::string::npos) << replay.output;
}

}  // namespace
}  // namespace commkit::testing
