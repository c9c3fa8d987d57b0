// Topology-based gpudoctor checks (pci.link, p2p.acs, rdma.ports) on sysfs trees written here.
#include <gtest/gtest.h>

#include <filesystem>

#include "commkit/diagnostics/check.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;

// A PCI function at sys/devices/pci0000:00/<chain...>, linked from sys/bus/pci/devices.
std::string Pci(const TempDir& d, const std::vector<std::string>& chain, const std::string& cls, const std::string& vendor,
                const std::string& cur_speed = "16.0 GT/s PCIe", int cur_width = 16, const std::string& config = "") {
  std::string rel = "sys/devices/pci0000:00";
  for (std::size_t i = 0; i < chain.size(); ++i) {
    rel += "/" + chain[i];
    if (fs::exists(d.path() / rel / "class")) continue;
    const bool last = i + 1 == chain.size();
    d.Write(rel + "/class", (last ? cls : "0x060400") + "\n");
    d.Write(rel + "/vendor", (last ? vendor : "0x1000") + "\n");
    d.Write(rel + "/device", "0x1234\n");
    d.Write(rel + "/numa_node", "0\n");
    d.Write(rel + "/current_link_speed", (last ? cur_speed : "16.0 GT/s PCIe") + "\n");
    d.Write(rel + "/max_link_speed", "16.0 GT/s PCIe\n");
    d.Write(rel + "/current_link_width", std::to_string(last ? cur_width : 16) + "\n");
    d.Write(rel + "/max_link_width", "16\n");
    if (!last && !config.empty()) d.Write(rel + "/config", config);
    fs::create_directories(d.path() / "sys/bus/pci/devices");
    fs::create_symlink("../../../" + rel.substr(4), d.path() / "sys/bus/pci/devices" / chain[i]);
  }
  return rel;
}

// 4 KiB config space with an ACS extended capability whose control register is `ctrl`.
std::string AcsConfig(unsigned ctrl) {
  std::string cfg(4096, '\0');
  cfg[0x100] = 0x0d;  // cap id 0x000d, version 1, next 0
  cfg[0x102] = 0x01;
  cfg[0x106] = static_cast<char>(ctrl & 0xff);
  cfg[0x107] = static_cast<char>((ctrl >> 8) & 0xff);
  return cfg;
}

CheckOutcome RunCheck(const TempDir& d, const std::string& id) {
  d.Write("sys/devices/system/node/node0/cpulist", "0-7\n");
  CheckRegistry reg = CheckRegistry::BuiltIn();
  Selection sel;
  sel.only = {id};
  Report rep = RunChecks(reg, CheckContext{SystemView::Replay(d.path())}, sel);
  EXPECT_EQ(rep.records.size(), 1u);
  return rep.records.empty() ? CheckOutcome{} : rep.records[0].outcome;
}

TEST(TopologyChecks, PciLinkNarrowGpuFails) {
  TempDir d;
  Pci(d, {"0000:00:01.0", "0000:01:00.0"}, "0x030200", "0x10de", "16.0 GT/s PCIe", 8);
  Pci(d, {"0000:00:02.0", "0000:02:00.0"}, "0x020000", "0x15b3");
  auto o = RunCheck(d, "pci.link");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  ASSERT_EQ(o.evidence.size(), 1u);
  EXPECT_NE(o.evidence[0].find("0000:01:00.0"), std::string::npos);
  EXPECT_NE(o.evidence[0].find("x8"), std::string::npos);
  EXPECT_NE(o.fix.find("lspci -vv -s 0000:01:00.0"), std::string::npos);
}

TEST(TopologyChecks, PciLinkSlowNicWarnsAndFullLinksPass) {
  TempDir d;
  Pci(d, {"0000:00:02.0", "0000:02:00.0"}, "0x020000", "0x15b3", "8.0 GT/s PCIe", 16);
  EXPECT_EQ(RunCheck(d, "pci.link").status, CheckStatus::kWarn);
  TempDir ok;
  Pci(ok, {"0000:00:01.0", "0000:01:00.0"}, "0x030200", "0x10de");
  EXPECT_EQ(RunCheck(ok, "pci.link").status, CheckStatus::kPass);
  TempDir none;
  EXPECT_EQ(RunCheck(none, "pci.link").status, CheckStatus::kSkip);
}

TEST(TopologyChecks, AcsRedirectAboveGpusIsReported) {
  TempDir d;
  const std::string acs = AcsConfig(0x001d);  // SV | RR | CR | UF
  Pci(d, {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, "0x030200", "0x10de", "16.0 GT/s PCIe", 16, acs);
  Pci(d, {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, "0x030200", "0x10de", "16.0 GT/s PCIe", 16, acs);
  auto o = RunCheck(d, "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;  // no CUDA fact: cannot prove P2P is blocked
  EXPECT_NE(o.fix.find("setpci -s 0000:00:01.0 ECAP_ACS+6.w=0000"), std::string::npos) << o.fix;
  EXPECT_NE(o.fix.find("NCCL_P2P_DISABLE=1"), std::string::npos);

  // The same with CUDA saying the GPUs cannot reach each other: a failure.
  d.Write(".commkit/facts/cuda", R"({"available":true,"device_count":2,"can_access_peer":[[false,false],[false,false]]})");
  EXPECT_EQ(RunCheck(d, "p2p.acs").status, CheckStatus::kFail);
}

TEST(TopologyChecks, AcsOffPassesAndOneGpuSkips) {
  TempDir d;
  const std::string off = AcsConfig(0x0000);
  Pci(d, {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, "0x030200", "0x10de", "16.0 GT/s PCIe", 16, off);
  Pci(d, {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, "0x030200", "0x10de", "16.0 GT/s PCIe", 16, off);
  EXPECT_EQ(RunCheck(d, "p2p.acs").status, CheckStatus::kPass);
  TempDir one;
  Pci(one, {"0000:00:01.0", "0000:01:00.0"}, "0x030200", "0x10de");
  EXPECT_EQ(RunCheck(one, "p2p.acs").status, CheckStatus::kSkip);
}

TEST(TopologyChecks, RdmaPortsFromVerbsFact) {
  TempDir d;
  // One RoCE HCA seen only by libibverbs: port DOWN.
  d.Write(".commkit/facts/verbs",
          R"({"available":true,"devices":[{"name":"mlx5_0","ports":[{"port":1,"state":1,"phys_state":3,"link_layer":2,)"
          R"("active_speed":64,"active_width":2,"gids":[]}]}]})");
  auto o = RunCheck(d, "rdma.ports");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.fix.find("mlx5_0:1"), std::string::npos);

  d.Write(".commkit/facts/verbs",
          R"({"available":true,"devices":[{"name":"mlx5_0","ports":[{"port":1,"state":4,"phys_state":5,"link_layer":2,)"
          R"("active_speed":64,"active_width":2,"gids":[{"index":1,"gid":"fe80:0000:0000:0000:0a00:00ff:fe00:0001","type":2},)"
          R"({"index":3,"gid":"0000:0000:0000:0000:0000:ffff:0a00:0a05","type":2,"ndev":"enp3s0"}]}]}]})");
  o = RunCheck(d, "rdma.ports");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_NE(o.fix.find("NCCL_IB_GID_INDEX=3"), std::string::npos) << o.fix;

  TempDir none;
  EXPECT_EQ(RunCheck(none, "rdma.ports").status, CheckStatus::kSkip);
}

}  // namespace
}  // namespace commkit::diagnostics
