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

}  // namespace
}  // namespace commkit::topology
