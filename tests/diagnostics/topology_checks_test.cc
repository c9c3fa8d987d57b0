// Topology-based gpudoctor checks (pci.link, p2p.acs, rdma.ports) on sysfs trees written here, and
// p2p.acs on the g5-like replay fixture tests/data/gpudoctor/g5-4gpu-no-p2p.
#include <gtest/gtest.h>

#include <filesystem>

#include "commkit/diagnostics/check.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;
using commkit::testing::TestDataDir;

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
  o = RunCheck(d, "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.summary.find("no peer access: GPU0-GPU1"), std::string::npos) << o.summary;
  // With the workaround in place jobs run (slower): a warning that still says how to fix ACS.
  d.Write(".commkit/facts/env", "NCCL_P2P_DISABLE=1\n");
  o = RunCheck(d, "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.fix.find("setpci -s 0000:00:01.0 ECAP_ACS+6.w=0000"), std::string::npos) << o.fix;
}

// --- g5-like replay fixture: 4x A10G on a flat VM PCI bus (AWS g5.12xlarge shape), no peer access --

CheckOutcome RunOn(const fs::path& root, const std::string& id) {
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(root)}, {{id}, {}});
  EXPECT_EQ(rep.records.size(), 1u);
  return rep.records.empty() ? CheckOutcome{} : rep.records[0].outcome;
}
fs::path G5() { return TestDataDir() / "gpudoctor" / "g5-4gpu-no-p2p"; }
bool Has(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}
constexpr const char* kP2pDisableFix =
    "export NCCL_P2P_DISABLE=1   # in the job's environment on every node: NCCL uses shared memory between these GPUs; "
    "vLLM/sglang also need --disable-custom-all-reduce (TensorRT-LLM: use_custom_all_reduce=false)";

TEST(TopologyChecks, G5WithoutPeerAccessGivesNcclP2pDisable) {
  CheckOutcome o = RunOn(G5(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_EQ(o.summary.rfind("no GPU peer access: all 6 pairs of GPU0..GPU3 (CUDA cuDeviceCanAccessPeer; no ACS bridge", 0), 0u)
      << o.summary;
  EXPECT_NE(o.summary.find("NCCL_P2P_DISABLE is not set"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("'peer access is not supported between these two devices'"), std::string::npos) << o.summary;
  EXPECT_EQ(o.fix, kP2pDisableFix);
  EXPECT_EQ(o.fix.rfind("export NCCL_P2P_DISABLE=1 ", 0), 0u);  // the first words are the command to paste
  for (const char* pair : {"(0, 1) = 0, (1, 0) = 0", "(0, 2) = 0", "(0, 3) = 0", "(1, 2) = 0", "(1, 3) = 0", "(2, 3) = 0, (3, 2) = 0"})
    EXPECT_TRUE(Has(o.evidence, std::string("CUDA: cuDeviceCanAccessPeer") + pair)) << pair;
  EXPECT_TRUE(Has(o.evidence, "running under a hypervisor"));
  // The rest of the box is healthy: these findings are the P2P one alone.
  EXPECT_EQ(RunOn(G5(), "pci.link").status, CheckStatus::kSkip);  // the VM shows no link attributes
  EXPECT_EQ(RunOn(G5(), "gpu.nvlink").status, CheckStatus::kSkip);
  EXPECT_EQ(RunOn(G5(), "gpu.ecc").status, CheckStatus::kPass);
}

TEST(TopologyChecks, G5WithNcclP2pDisableSetPasses) {
  TempDir d;
  fs::copy(G5(), d.path(), fs::copy_options::recursive);
  d.Write(".commkit/facts/env", "LD_LIBRARY_PATH=/usr/local/cuda/lib64\nNCCL_DEBUG=INFO\nNCCL_P2P_DISABLE=1\n");
  CheckOutcome o = RunOn(d.path(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_NE(o.summary.find("NCCL_P2P_DISABLE=1 is set, so NCCL uses shared memory between them"), std::string::npos) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NCCL_P2P_DISABLE=1"));
  EXPECT_TRUE(o.fix.empty()) << o.fix;
  // NCCL disables P2P only for the value 1.
  d.Write(".commkit/facts/env", "NCCL_P2P_DISABLE=0\n");
  o = RunOn(d.path(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NCCL_P2P_DISABLE=0"));
  EXPECT_EQ(o.fix, kP2pDisableFix);
}

TEST(TopologyChecks, G5WithoutCudaUsesNvmlP2pStatusAndNamesPairs) {
  TempDir d;
  fs::copy(G5(), d.path(), fs::copy_options::recursive);
  d.Write(".commkit/facts/cuda", R"({"available":false,"error":"libcuda.so.1 not found"})");
  CheckOutcome o = RunOn(d.path(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("all 6 pairs of GPU0..GPU3 (NVML nvmlDeviceGetP2PStatus(READ)"), std::string::npos) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NVML: P2P read GPU0 (00000000:00:1B.0) -> GPU1 (00000000:00:1C.0) = CNS (chipset not supported)"));
  EXPECT_EQ(o.fix, kP2pDisableFix);

  // Only some pairs without access (CUDA): the summary names them.
  d.Write(".commkit/facts/cuda",
          R"({"available":true,"device_count":4,"can_access_peer":[[false,true,false,true],[true,false,true,true],)"
          R"([false,true,false,true],[true,true,true,false]]})");
  o = RunOn(d.path(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_EQ(o.summary.rfind("no GPU peer access: GPU0-GPU2 (CUDA cuDeviceCanAccessPeer;", 0), 0u) << o.summary;

  // CUDA grants every pair: CUDA is the authority when it answers (the fixture's NVML still says CNS).
  d.Write(".commkit/facts/cuda",
          R"({"available":true,"device_count":4,"can_access_peer":[[false,true,true,true],[true,false,true,true],)"
          R"([true,true,false,true],[true,true,true,false]]})");
  o = RunOn(d.path(), "p2p.acs");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_NE(o.summary.find("every GPU pair has peer access (CUDA cuDeviceCanAccessPeer)"), std::string::npos) << o.summary;
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
