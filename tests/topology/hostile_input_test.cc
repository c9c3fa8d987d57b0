// Topology input that aborted, blocked or was silently misread before: JSON numbers out of range,
// floats where integers belong, FIFOs/symlink loops/directories as topology files, a BMC's VGA in an
// NCCL XML, and an NCCL XML export of a topology that has no bus ids.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "commkit/common/strings.h"
#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/json.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

namespace fs = std::filesystem;

TEST(HostileJson, NumbersOutOfRangeAreDataLossNotAnAbort) {
  auto r = LoadJson(R"({"schema":"commkit.topology","version":1e999,"nodes":[]})", "big.json");
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("big.json"), std::string::npos);
  // A float or an over-large integer where an int belongs: an error, not a float-to-int overflow.
  for (const char* node : {R"({"kind":"gpu","gpu":{"index":1e300}})", R"({"kind":"gpu","gpu":{"index":4294967296}})",
                           R"({"kind":"gpu","parent":-1e20})", R"({"kind":"gpu","id":18446744073709551615})",
                           R"({"kind":"gpu","gpu":{"gdr":"yes"}})", R"({"kind":"nic","nic":{"ports":7}})",
                           R"({"kind":"gpu","gpu":5})"}) {
    SCOPED_TRACE(node);
    auto bad = LoadJson(std::string(R"({"schema":"commkit.topology","version":1,"nodes":[)") + node + "]}", "t.json");
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
  }
  auto links = LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[],"links":{"kind":"pcie"}})", "t.json");
  EXPECT_EQ(links.status().code(), StatusCode::kDataLoss) << links.status().ToString();
}

TEST(HostileFiles, FifoSymlinkLoopAndDirectoryAreRefusedWithoutBlocking) {
  testing::TempDir dir;
  const fs::path fifo = dir.path() / "topo.xml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = ImportTopologyFile(fifo);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << f.status().ToString();
  EXPECT_NE(f.status().message().find("FIFO"), std::string::npos) << f.status().ToString();
  fs::create_symlink("loop-b", dir.path() / "loop-a");
  fs::create_symlink("loop-a", dir.path() / "loop-b");
  auto loop = ImportTopologyFile(dir.path() / "loop-a");
  EXPECT_NE(loop.status().message().find("symbolic links"), std::string::npos) << loop.status().ToString();
  auto d = ImportTopologyFile(dir.path());
  EXPECT_NE(d.status().message().find("directory"), std::string::npos) << d.status().ToString();
}

// NCCL builds a GPU only from a <pci> with a <gpu> child (or one it fills from CUDA by bus id): the
// ASPEED VGA of a BMC is class 0x0300 and never one.
TEST(NcclXmlImport, ADisplayDeviceOfAnotherVendorWithoutGpuIsNotAGpu) {
  constexpr const char* kXml = R"(<system version="1">
  <cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:02:00.0" class="0x030000" vendor="0x1a03" device="0x2000" link_speed="5.0 GT/s PCIe" link_width="1"/>
    <pci busid="0000:17:00.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="16.0 GT/s PCIe" link_width="16"/>
    <pci busid="0000:18:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
  </cpu>
</system>)";
  auto t = ImportNcclXml(kXml, "bmc.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->GpuCount(), 2u) << "the NVIDIA GPU and the vendor-less one (Azure/AWS files omit vendors)";
  auto vga = t->FindByBusId("0000:02:00.0");
  ASSERT_TRUE(vga.has_value());
  EXPECT_EQ(t->node(*vga).kind, NodeKind::kOtherPci);
  EXPECT_NE(Join(t->metadata().notes, "\n").find("BMC"), std::string::npos);
}

TEST(NcclXmlExport, GpusWithoutBusIdsAreAnErrorNotAnEmptySystem) {
  constexpr const char* kMatrix =
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNV4\t0-7\t0\n"
      "GPU1\tNV4\t X \t0-7\t0\n";
  auto t = ImportNvsmiMatrix(kMatrix, "m.txt");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto xml = ExportNcclXml(*t);
  ASSERT_FALSE(xml.ok()) << "was: " << xml.value();
  EXPECT_EQ(xml.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(xml.status().message().find("GPU0 (no PCI bus id)"), std::string::npos) << xml.status().ToString();
  EXPECT_NE(xml.status().message().find("2 of 2 GPU(s)"), std::string::npos) << xml.status().ToString();
  EXPECT_FALSE(ExportNcclXml(Topology()).ok()) << "nothing at all to place";
}

// Found by nccl_xml_fuzz: a speed of 1e133 Mb/s was imported and then converted to an integer on export.
TEST(NcclXmlImport, ANicSpeedNoPortCanHaveIsAnErrorNamingTheAttribute) {
  for (const char* speed : {"1e133", "-100", "inf", "nan", "fast"}) {
    SCOPED_TRACE(speed);
    const std::string xml = StrCat(R"(<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64">
  <nic><net name="mlx5_0" dev="0" speed=")", speed, R"(" port="1" maxconn="131072" gdr="1"/></nic>
</cpu></system>)");
    auto t = ImportNcclXml(xml, "fuzzed.xml");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kDataLoss) << t.status().ToString();
    EXPECT_NE(t.status().message().find("fuzzed.xml:2"), std::string::npos) << t.status().ToString();
    EXPECT_NE(t.status().message().find(StrCat("speed=\"", speed, "\"")), std::string::npos) << t.status().ToString();
  }
  auto ok = ImportNcclXml(R"(<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64">
  <nic><net name="mlx5_0" dev="0" speed="400000" port="1"/></nic></cpu></system>)", "ndr.xml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
}

// Other sources (a topology JSON) can still carry such a speed: the export leaves it out instead.
TEST(NcclXmlExport, ASpeedNoIntegerHoldsIsLeftOut) {
  auto t = ImportNcclXml(R"(<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64">
  <pci busid="0000:17:00.0" class="0x030200" vendor="0x10de" link_speed="16.0 GT/s PCIe" link_width="16">
    <gpu dev="0" sm="90" rank="0" gdr="1"/></pci>
  <nic><net name="mlx5_0" dev="0" speed="400000" port="1"/></nic></cpu></system>)", "one.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (std::size_t i = 0; i < t->nodes().size(); ++i)
    if (t->nodes()[i].kind == NodeKind::kNic) t->node(t->nodes()[i].id).nic.ports.front().speed_gbps = 1e300;
  auto xml = ExportNcclXml(*t);
  ASSERT_TRUE(xml.ok()) << xml.status().ToString();
  EXPECT_NE(xml->find("mlx5_0"), std::string::npos) << *xml;
  EXPECT_EQ(xml->find(" speed="), std::string::npos) << *xml;
}

}  // namespace
}  // namespace commkit::topology
