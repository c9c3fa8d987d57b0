// Importers on truncated and garbled input: every prefix and fixed-seed byte flips of small NCCL
// XML documents must give a clean error or a valid topology, never a crash.
#include <gtest/gtest.h>

#include <random>

#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

namespace commkit::topology {
namespace {

constexpr const char* kSmall = R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="106">
    <pci busid="0000:0c:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:0f:00.0" class="0x030200" vendor="0x10de" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:c0:00.0" count="6" tclass="0x068000"/></gpu>
      </pci>
      <pci busid="0000:10:00.0" class="0x030200" vendor="0x10de" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="80" rank="1" gdr="1"><nvlink target="0000:c0:00.0" count="6" tclass="0x068000"/></gpu>
      </pci>
      <pci busid="0000:11:00.0" class="0x020700" vendor="0x15b3" link_speed="16.0 GT/s PCIe" link_width="16">
        <nic><net name="mlx5_0" dev="0" speed="200000" port="1" guid="0x1" maxconn="131072" gdr="1"/></nic>
      </pci>
    </pci>
  </cpu>
</system>
)";

void Exercise(const std::string& text) {
  auto r = ImportNcclXml(text, "fuzz.xml");
  if (r.ok()) {
    EXPECT_TRUE(r->Validate().ok());
    (void)ComputePaths(*r);
  } else {
    EXPECT_FALSE(r.status().message().empty());
    EXPECT_NE(r.status().message().find("fuzz.xml"), std::string::npos) << r.status().ToString();
  }
}

TEST(ImportRobustnessTest, SmallDocumentParses) {
  auto r = ImportNcclXml(kSmall, "small.xml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GpuCount(), 2u);
  PathMatrix m = ComputePaths(*r);
  EXPECT_EQ(m.at(0, 1).Label(), "NV6");
  EXPECT_EQ(m.at(0, 2).Label(), "PIX");
  EXPECT_TRUE(m.at(0, 2).gdr);
}

TEST(ImportRobustnessTest, EveryPrefixFailsCleanly) {
  const std::string full = kSmall;
  for (std::size_t n = 0; n < full.size(); ++n) Exercise(full.substr(0, n));
  auto truncated = ImportNcclXml(full.substr(0, full.size() / 2), "half.xml");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("half.xml:"), std::string::npos);
}

TEST(ImportRobustnessTest, RandomByteFlipsFailCleanly) {
  std::mt19937 rng(12345);
  const std::string full = kSmall;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    Exercise(s);
  }
}

TEST(ImportRobustnessTest, BadAttributesAndNesting) {
  EXPECT_FALSE(ImportNcclXml(R"(<system><cpu numaid="zero"/></system>)", "fuzz.xml").ok());
  EXPECT_FALSE(ImportNcclXml(R"(<system><cpu><pci/></cpu></system>)", "fuzz.xml").ok());
  EXPECT_FALSE(ImportNcclXml(R"(<notsystem/>)", "fuzz.xml").ok());
  std::string deep = "<system><cpu>";
  for (int i = 0; i < 200; ++i) deep += "<pci busid=\"0000:" + std::to_string(i % 100) + ":00." + std::to_string(i / 100) + "\">";
  for (int i = 0; i < 200; ++i) deep += "</pci>";
  deep += "</cpu></system>";
  Exercise(deep);
  EXPECT_FALSE(ImportNcclXml(deep, "fuzz.xml").ok());
  EXPECT_EQ(DetectTopologyFormat("<graphs version=\"1\">"), TopologyFormat::kNcclGraphXml);
  EXPECT_EQ(ImportTopologyText("hello", "x").status().code(), StatusCode::kInvalidArgument);
}

constexpr const char* kNvsmi =
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV4\tPIX\t0-7\t0\n"
    "GPU1\tNV4\t X \tSOC\t8-15\t1\n"
    "NIC0\tPIX\tSOC\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n";

TEST(ImportRobustnessTest, NvsmiPrefixesAndFlips) {
  auto ok = ImportNvsmiMatrix(kNvsmi, "nvsmi.txt");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  PathMatrix m = ComputePaths(*ok);
  EXPECT_EQ(m.at(0, 1).Label(), "NV4");
  EXPECT_EQ(m.at(1, 2).Label(), "SYS");
  EXPECT_EQ(m.labels()[2], "mlx5_0");
  const std::string full = kNvsmi;
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto r = ImportTopologyText(full.substr(0, n), "nvsmi.txt");
    if (r.ok()) (void)ComputePaths(*r);
  }
  std::mt19937 rng(777);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = full;
    for (int f = 0; f < 3; ++f) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto a = ImportNvsmiMatrix(s, "nvsmi.txt");
    if (a.ok()) {
      EXPECT_TRUE(a->Validate().ok());
      (void)ComputePaths(*a);
    }
    auto b = ImportNvsmiP2p(s, "nvsmi.txt");
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("nvsmi.txt"), std::string::npos);
    }
  }
  EXPECT_FALSE(ImportNvsmiMatrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "t").ok());  // truncated
  EXPECT_FALSE(ImportNvsmiMatrix("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "t").ok());
}

constexpr const char* kHwloc = R"(<?xml version="1.0" encoding="UTF-8"?>
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x000000ff" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x0000000f" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x0000000f" gp_index="3"/>
      <object type="Bridge" gp_index="4" bridge_type="0-1" depth="0" bridge_pci="0000:[00-0f]">
        <object type="Bridge" gp_index="5" bridge_type="1-1" depth="1" pci_busid="0000:00:01.0" pci_type="0604 [8086:2030] [8086:0000] 04 00" pci_link_speed="15.753846">
          <object type="Bridge" gp_index="6" bridge_type="1-1" depth="2" pci_busid="0000:01:00.0" pci_type="0604 [10b5:9781] [10b5:9781] b0 00" pci_link_speed="15.753846">
            <object type="Bridge" gp_index="7" bridge_type="1-1" depth="3" pci_busid="0000:02:00.0" pci_type="0604 [10b5:9781] [10b5:9781] b0 00" pci_link_speed="15.753846">
              <object type="PCIDev" gp_index="8" pci_busid="0000:03:00.0" pci_type="0302 [10de:1db8] [10de:131d] a1 00" pci_link_speed="15.753846">
                <object type="OSDev" gp_index="9" name="nvml0" osdev_type="12"/>
              </object>
            </object>
            <object type="Bridge" gp_index="10" bridge_type="1-1" depth="3" pci_busid="0000:02:08.0" pci_type="0604 [10b5:9781] [10b5:9781] b0 00" pci_link_speed="15.753846">
              <object type="PCIDev" gp_index="11" pci_busid="0000:04:00.0" pci_type="0207 [15b3:1017] [15b3:0007] 00 00" pci_link_speed="15.753846">
                <object type="OSDev" gp_index="12" name="mlx5_0" osdev_type="48"/>
              </object>
            </object>
          </object>
        </object>
      </object>
    </object>
  </object>
</topology>
)";

TEST(ImportRobustnessTest, HwlocSmallDocumentAndGarbage) {
  auto ok = ImportHwlocXml(kHwloc, "hwloc.xml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->GpuCount(), 1u);
  ASSERT_EQ(ok->NicCount(), 1u);
  auto p = ClassifyPath(*ok, ok->Gpus()[0], ok->Nics()[0]);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Label(), "PIX");  // both behind switch 01:00.0 (downstream ports collapsed)
  EXPECT_TRUE(p->gdr);
  const std::string full = kHwloc;
  for (std::size_t n = 0; n < full.size(); n += 3) {
    auto r = ImportHwlocXml(full.substr(0, n), "hwloc.xml");
    if (r.ok()) {
      (void)ComputePaths(*r);
    } else {
      EXPECT_NE(r.status().message().find("hwloc.xml"), std::string::npos);
    }
  }
  std::mt19937 rng(4242);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s = full;
    for (int f = 0; f < 3; ++f) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto r = ImportHwlocXml(s, "hwloc.xml");
    if (r.ok()) {
      EXPECT_TRUE(r->Validate().ok());
      (void)ComputePaths(*r);
    }
  }
  EXPECT_FALSE(ImportHwlocXml(R"(<topology><distances2hetero name="NVLinkBandwidth"><indexes>OSDev:1 OSDev:2</indexes><u64values>1 2 3</u64values></distances2hetero></topology>)", "d.xml").ok());
}

}  // namespace
}  // namespace commkit::topology
