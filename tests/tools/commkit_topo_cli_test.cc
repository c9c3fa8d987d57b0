// commkit-topo end to end: export --format dot|svg|json (stdout and -o FILE), --from the exported
// JSON, errors, and the live `show` against this machine's /sys.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "commkit/common/strings.h"
#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/json.h"
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
    xml_ = dir_.Write("box.xml", ExportNcclXml(Box()).value()).string();
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

// `export --format json` writes the documented topology schema (ExportJson, docs/topology-json.md),
// not the `show --json` report, and `--from` that file gives the same matrix, export and advice.
TEST_F(CommkitTopoCli, ExportJsonIsTheTopologySchemaAndReimports) {
  const auto out = dir_.path() / "topo.json";
  auto r = RunCommand(Topo("export --format json -o " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string json = Slurp(out);
  EXPECT_EQ(json, ExportJson(topo_) + "\n");
  EXPECT_NE(json.find("\"schema\": \"commkit.topology\""), std::string::npos);
  EXPECT_EQ(json.find("\"probers\""), std::string::npos) << "not the show --json report";
  auto loaded = LoadJson(json, "topo.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();

  const std::string bin = (BinDir() / "commkit-topo").string();
  auto m1 = RunCommand(Topo("matrix"));
  auto m2 = RunCommand(bin + " --from " + out.string() + " matrix");
  ASSERT_EQ(m1.exit_code, 0) << m1.output;
  ASSERT_EQ(m2.exit_code, 0) << m2.output;
  EXPECT_EQ(m2.output, m1.output);
  EXPECT_NE(m2.output.find("NV12"), std::string::npos) << m2.output;
  // A fixed point: exporting the re-imported JSON gives the same file.
  auto again = RunCommand(bin + " --from " + out.string() + " export --format json");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, json);
  auto a1 = RunCommand("env -u MASTER_ADDR " + Topo("advise --format json"));
  auto a2 = RunCommand("env -u MASTER_ADDR " + bin + " --from " + out.string() + " advise --format json");
  EXPECT_EQ(a1.exit_code, a2.exit_code);
  EXPECT_EQ(a2.output, a1.output);
}

// Stdout export, and a .json file that starts with a UTF-8 byte-order mark (which the content
// sniffer does not take for JSON) is still read as JSON because of its name.
TEST_F(CommkitTopoCli, ExportJsonToStdoutAndBomJsonFile) {
  auto r = RunCommand(Topo("export --format json 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, ExportJson(topo_) + "\n");
  const auto bom = dir_.Write("bom.json", "\xEF\xBB\xBF" + r.output);
  auto m = RunCommand((BinDir() / "commkit-topo").string() + " --from " + bom.string() + " matrix");
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_EQ(m.output, ExportNvsmiMatrix(topo_));
}

// The `show --json` report is not importable; the error says which command writes the schema.
TEST_F(CommkitTopoCli, ShowJsonReportIsRejectedWithAHint) {
  auto show = RunCommand(Topo("show --json 2>/dev/null"));
  ASSERT_EQ(show.exit_code, 0) << show.output;
  const auto report = dir_.Write("report.json", show.output);
  auto r = RunCommand((BinDir() / "commkit-topo").string() + " --from " + report.string() + " matrix");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("export --format json"), std::string::npos) << r.output;
}

// Real files from an H100 VM (tests/data/topology): NCCL's dump says link_width="0" and nvidia-smi's
// matrix has no PCIe link at all; `show` says "?" for what nobody reported, never "x0".
TEST(CommkitTopoCliReal, ShowMarksUnreportedLinkFieldsUnknown) {
  const auto data = TestDataDir() / "topology";
  auto dump = RunCommand((BinDir() / "commkit-topo").string() + " --from " +
                         (data / "h100-vm_nccl-2.28.9_topo-dump.xml").string() + " show");
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  EXPECT_NE(dump.output.find("0000:00:06.0  PCIe gen5 x?"), std::string::npos) << dump.output;
  auto smi = RunCommand((BinDir() / "commkit-topo").string() + " --from " +
                        (data / "h100-vm_nvidia-smi-580_topo-m.txt").string() + " show");
  ASSERT_EQ(smi.exit_code, 0) << smi.output;
  EXPECT_NE(smi.output.find("PCIe gen? x?"), std::string::npos) << smi.output;
  EXPECT_EQ(smi.output.find("x0"), std::string::npos) << smi.output;
}

// Indented lines right after a "header:" line of `show` output.
std::vector<std::string> ShowSection(const std::string& out, const std::string& header) {
  std::vector<std::string> lines;
  bool in = false;
  for (const std::string& line : Split(out, '\n')) {
    if (in && !StartsWith(line, "  ")) break;
    if (in) lines.push_back(line);
    if (StartsWith(line, header)) in = true;
  }
  return lines;
}

// The PCI function ("0000:00:03.0") a /sys/class/net entry's device link leads to (or below), or ""
// for a virtual interface (and for a USB NIC, whose PCI function is the USB controller).
std::string PciFunctionOf(const std::filesystem::path& netdev) {
  std::error_code ec;
  const auto dev = std::filesystem::canonical(netdev / "device", ec);
  if (ec || dev.string().find("/usb") != std::string::npos) return "";
  static const std::regex kBdf("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]");
  std::string bdf;
  for (const auto& part : dev)
    if (std::regex_match(part.string(), kBdf)) bdf = part.string();  // the deepest one
  return bdf;
}

// NVIDIA display/3D controllers in /sys/bus/pci/devices.
int NvidiaGpusInSysfs() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/bus/pci/devices", ec)) {
    const std::string vendor(Trim(Slurp(e.path() / "vendor"))), cls(Trim(Slurp(e.path() / "class")));
    if (vendor == "0x10de" && (StartsWith(cls, "0x0300") || StartsWith(cls, "0x0302"))) ++n;
  }
  return n;
}

// Live show against this machine: every /sys/class/net entry but lo is in "interfaces:", every one
// backed by a PCI function is a NIC line with that bus id and netdev, and the GPU line matches the
// NVIDIA GPUs sysfs lists ("GPUs: no GPU (...)" without any).
TEST(CommkitTopoCliLive, ShowListsThisMachinesNicsAndGpus) {
  auto r = RunCommand((BinDir() / "commkit-topo").string() + " show");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ifaces = ShowSection(r.output, "interfaces:");
  const auto nics = ShowSection(r.output, "NICs:");
  int checked = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = e.path().filename().string();
    if (name == "lo") continue;
    SCOPED_TRACE(name);
    ++checked;
    EXPECT_TRUE(std::any_of(ifaces.begin(), ifaces.end(), [&](const std::string& l) { return StartsWith(l, "  " + name + "  "); }))
        << r.output;
    const std::string bdf = PciFunctionOf(e.path());
    if (bdf.empty()) continue;
    EXPECT_TRUE(std::any_of(nics.begin(), nics.end(), [&](const std::string& l) {
      const auto at = l.find("  netdev ");
      if (l.find("  " + bdf + "  ") == std::string::npos || at == std::string::npos) return false;
      const auto names = Split(l.substr(at + 9), ',');
      return std::find(names.begin(), names.end(), name) != names.end();
    })) << bdf << "\n" << r.output;
  }
  if (checked == 0) GTEST_SKIP() << "no /sys/class/net entries besides lo";
  const int gpus = NvidiaGpusInSysfs();
  if (gpus == 0) {
    EXPECT_NE(r.output.find("\nGPUs: no GPU ("), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("  GPU0  "), std::string::npos) << r.output;
  } else {
    EXPECT_NE(r.output.find(StrCat("\nGPUs: ", gpus, "\n")), std::string::npos) << r.output;
  }
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
