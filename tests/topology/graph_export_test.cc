// DOT and SVG exporters.
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "two_gpu_box.h"

namespace commkit::topology {
namespace {

std::size_t Count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

Topology Box() { return commkit::testing::TwoGpuBox({.gpu_name = "A100 <SXM> & co"}); }

TEST(GraphExportTest, DotHasNodesEdgesAndLabels) {
  const std::string dot = ExportDot(Box());
  EXPECT_EQ(dot.rfind("graph topology {", 0), 0u);
  EXPECT_EQ(Count(dot, "fillcolor="), 5u);
  EXPECT_EQ(Count(dot, " -- "), 5u);  // 4 tree edges + 1 NVLink
  EXPECT_NE(dot.find("PCIe Gen4 x16 31.5 GB/s"), std::string::npos);
  EXPECT_NE(dot.find("NV12 300.0 GB/s"), std::string::npos);
  EXPECT_NE(dot.find("CPU / NUMA 0"), std::string::npos);
}

TEST(GraphExportTest, SvgIsLayeredAndEscaped) {
  const std::string svg = ExportSvg(Box());
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(Count(svg, "<rect "), 6u);  // background + 5 nodes
  EXPECT_EQ(Count(svg, "<line "), 5u);
  EXPECT_NE(svg.find("NV12 300.0 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("A100 &lt;SXM&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(svg.find("<SXM>"), std::string::npos);
  // CPU row above the switch row above the device row.
  const auto y_of = [&](const std::string& text) {
    const std::size_t p = svg.find(">" + text + "<");
    const std::size_t yq = svg.rfind(" y=\"", p);
    return std::stoi(svg.substr(yq + 4));
  };
  EXPECT_LT(y_of("CPU / NUMA 0"), y_of("GPU0"));
  EXPECT_EQ(y_of("GPU0"), y_of("mlx5_0"));
  EXPECT_NE(ExportSvg(Topology()).find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace commkit::topology
