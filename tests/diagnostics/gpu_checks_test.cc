// gpu.visibility, gpu.nvlink, gpu.ecc, gpu.clocks and net.efa on replayed machines: the fixtures under
// tests/data/gpudoctor (an 8-GPU HGX box with one NVLink down, an A100 with a pending row remap and a
// hardware slowdown, an EFA node without aws-ofi-nccl, a g5-like 4x A10G VM) and NVML facts written here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "commkit/diagnostics/check.h"
#include "commkit/topology/probe.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;
using commkit::testing::TestDataDir;
using json = nlohmann::json;

CheckOutcome RunOne(const fs::path& root, const std::string& id) {
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(root)}, {{id}, {}});
  EXPECT_EQ(rep.records.size(), 1u);
  return rep.records.empty() ? CheckOutcome{} : rep.records[0].outcome;
}
fs::path Fixture(const std::string& name) { return TestDataDir() / "gpudoctor" / name; }

bool Has(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

json Gpu(int index, const std::string& name = "NVIDIA H100 80GB HBM3") {
  return {{"index", index}, {"name", name}, {"bus_id", "00000000:" + std::to_string(10 + index) + ":00.0"}};
}
void WriteNvml(const TempDir& d, const json& gpus) {
  d.Write(".commkit/facts/nvml", json{{"available", true}, {"driver_version", "550.54.15"}, {"gpus", gpus}}.dump());
}
json Links(int n, const std::vector<int>& down = {}, const std::string& remote = "00000000:05:00.0") {
  json l = json::array();
  for (int i = 0; i < n; ++i) {
    const bool active = std::find(down.begin(), down.end(), i) == down.end();
    l.push_back(active ? json{{"link", i}, {"active", true}, {"remote_bus_id", remote}} : json{{"link", i}, {"active", false}});
  }
  return l;
}

// --- fixtures ------------------------------------------------------------------------------------

TEST(GpuChecks, HgxBoxWithOneNvLinkDown) {
  CheckOutcome o = RunOne(Fixture("hgx-8gpu-nvlink-down"), "gpu.nvlink");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("GPU3"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("link 7 down"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("1 GPU(s)"), std::string::npos) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "GPU3 (00000000:48:00.0, NVIDIA H100 80GB HBM3): 17/18 NVLink(s) active, inactive: link 7"));
  EXPECT_TRUE(Has(o.evidence, "GPU0 (00000000:18:00.0, NVIDIA H100 80GB HBM3): 18/18 NVLink(s) active"));
  EXPECT_NE(o.fix.find("nvidia-smi nvlink -s -i 3"), std::string::npos) << o.fix;
  EXPECT_NE(o.fix.find("nvidia-smi -r -i 3"), std::string::npos) << o.fix;
  // The other GPU checks on the same box pass.
  EXPECT_EQ(RunOne(Fixture("hgx-8gpu-nvlink-down"), "gpu.ecc").status, CheckStatus::kPass);
  EXPECT_EQ(RunOne(Fixture("hgx-8gpu-nvlink-down"), "gpu.clocks").status, CheckStatus::kPass);
  EXPECT_EQ(RunOne(Fixture("hgx-8gpu-nvlink-down"), "net.efa").status, CheckStatus::kSkip);
}

TEST(GpuChecks, RemapPendingAndHwSlowdown) {
  CheckOutcome ecc = RunOne(Fixture("gpu-remap-pending-hwslowdown"), "gpu.ecc");
  EXPECT_EQ(ecc.status, CheckStatus::kWarn) << ecc.summary;
  EXPECT_NE(ecc.summary.find("GPU0 has a row remap pending"), std::string::npos) << ecc.summary;
  EXPECT_TRUE(Has(ecc.evidence, "GPU0 (00000000:07:00.0, NVIDIA A100-SXM4-80GB): ECC on, 2 row(s) remapped"));
  EXPECT_EQ(ecc.fix, "when GPU0 is idle: nvidia-smi -r -i 0 (or reboot)");

  CheckOutcome clocks = RunOne(Fixture("gpu-remap-pending-hwslowdown"), "gpu.clocks");
  EXPECT_EQ(clocks.status, CheckStatus::kFail) << clocks.summary;
  EXPECT_NE(clocks.summary.find("GPU0 HwSlowdown"), std::string::npos) << clocks.summary;
  EXPECT_EQ(clocks.summary.find("GPU1"), std::string::npos) << clocks.summary;
  EXPECT_TRUE(Has(clocks.evidence, "clocks event reasons 0xc = SwPowerCap | HwSlowdown"));
  EXPECT_TRUE(Has(clocks.evidence, "GPU1 (00000000:47:00.0, NVIDIA A100-SXM4-80GB): clocks event reasons 0x1 = GpuIdle"));
  EXPECT_NE(clocks.fix.find("nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i 0"), std::string::npos) << clocks.fix;
  EXPECT_EQ(RunOne(Fixture("gpu-remap-pending-hwslowdown"), "gpu.nvlink").status, CheckStatus::kSkip);  // PCIe only
}

TEST(GpuChecks, EfaNodeWithoutPlugin) {
  CheckOutcome o = RunOne(Fixture("efa-node-no-plugin"), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("without the aws-ofi-nccl NCCL plugin"), std::string::npos) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "EFA devices: PCI 0000:10:1b.0 (1d0f:efa1)"));
  EXPECT_TRUE(Has(o.evidence, "libfabric 1.22 fi_getinfo(efa): rdmap16s27-rdm (rdm)"));
  EXPECT_NE(o.fix.find("install aws-ofi-nccl"), std::string::npos) << o.fix;
  EXPECT_NE(o.fix.find("LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib"), std::string::npos) << o.fix;
  EXPECT_EQ(o.summary.find(';'), std::string::npos) << "only the plugin is wrong: " << o.summary;
}

TEST(GpuChecks, EfaPluginOffTheLoaderPathThenFixed) {
  TempDir d;
  fs::copy(Fixture("efa-node-no-plugin"), d.path(), fs::copy_options::recursive);
  d.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "");
  CheckOutcome o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("installed (/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so) but NCCL will not load it"), std::string::npos)
      << o.summary;
  EXPECT_EQ(o.fix, "export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:$LD_LIBRARY_PATH NCCL_NET_PLUGIN=ofi");

  // Following the fix: the directory on LD_LIBRARY_PATH and NCCL_NET_PLUGIN=ofi -> pass.
  d.Write(".commkit/facts/env",
          "FI_PROVIDER=efa\nLD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64\nNCCL_NET_PLUGIN=ofi\n");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NCCL net plugin: /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"));
}

// net.efa finds the plugin as NCCL does (nccl_libraries): each NCCL_NET_PLUGIN entry as given, then
// libnccl-net-<entry>.so, entries of a comma list in order, bare names on the loader path only.
TEST(GpuChecks, EfaPluginFollowsNcclsLoaderOrderAndLists) {
  TempDir d;
  fs::copy(Fixture("efa-node-no-plugin"), d.path(), fs::copy_options::recursive);
  d.Write(".commkit/facts/env", "FI_PROVIDER=efa\nNCCL_NET_PLUGIN=ofi\n");
  CheckOutcome o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("without the aws-ofi-nccl NCCL plugin"), std::string::npos) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NCCL net plugin: none (NCCL_NET_PLUGIN=ofi: ofi, libnccl-net-ofi.so not found)"));

  // A comma list: the first entry is absent, the second is on the loader path (ld.so.conf.d).
  d.Write("usr/lib/x86_64-linux-gnu/libnccl-net-ofi.so", "");
  d.Write(".commkit/facts/env", "FI_PROVIDER=efa\nNCCL_NET_PLUGIN=gib,ofi\n");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NCCL net plugin: /usr/lib/x86_64-linux-gnu/libnccl-net-ofi.so (NCCL_NET_PLUGIN=gib,ofi)"));
  EXPECT_TRUE(Has(o.evidence, "NCCL_NET_PLUGIN entry 'gib': gib, libnccl-net-gib.so not found"));

  // On the loader path under a name NCCL does not look for by default: only NCCL_NET_PLUGIN is missing.
  d.Write(".commkit/facts/env", "FI_PROVIDER=efa\n");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("installed (/usr/lib/x86_64-linux-gnu/libnccl-net-ofi.so) but NCCL will not load it "
                           "(NCCL looks for libnccl-net.so)"),
            std::string::npos)
      << o.summary;
  EXPECT_EQ(o.fix, "export NCCL_NET_PLUGIN=ofi");

  // A path is opened as given; "none" turns plugins off.
  d.Write(".commkit/facts/env", "FI_PROVIDER=efa\nNCCL_NET_PLUGIN=/usr/lib/x86_64-linux-gnu/libnccl-net-ofi.so\n");
  EXPECT_EQ(RunOne(d.path(), "net.efa").status, CheckStatus::kPass);
  d.Write(".commkit/facts/env", "FI_PROVIDER=efa\nNCCL_NET_PLUGIN=None\n");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_EQ(o.fix, "unset NCCL_NET_PLUGIN");
}

TEST(GpuChecks, EfaVariablesThatContradictTheMachine) {
  TempDir d;
  fs::copy(Fixture("efa-node-no-plugin"), d.path(), fs::copy_options::recursive);
  d.Write("usr/lib/x86_64-linux-gnu/libnccl-net.so", "");
  d.Write(".commkit/facts/env", "FI_EFA_USE_DEVICE_RDMA=0\nFI_PROVIDER=tcp\nNCCL_NET=Socket\nNCCL_PROTO=LL,LL128\n");
  CheckOutcome o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("FI_PROVIDER=tcp"), std::string::npos);
  EXPECT_NE(o.summary.find("NCCL_NET=Socket"), std::string::npos);
  EXPECT_NE(o.summary.find("FI_EFA_USE_DEVICE_RDMA=0 on p4d"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("excludes the Simple protocol"), std::string::npos);
  EXPECT_NE(o.fix.find("export FI_PROVIDER=efa"), std::string::npos);
  EXPECT_NE(o.fix.find("unset NCCL_NET"), std::string::npos);
  EXPECT_TRUE(Has(o.evidence, "NCCL net plugin: /usr/lib/x86_64-linux-gnu/libnccl-net.so"));

  d.Write(".commkit/facts/env", "NCCL_PROTO=LL128\n");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  // A device the provider cannot see, in a container without uverbs.
  d.Write(".commkit/facts/libfabric", R"({"available":false,"error":"fi_getinfo(efa): No data available"})");
  fs::remove_all(d.path() / "dev");
  o = RunOne(d.path(), "net.efa");
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.summary.find("efa provider is not usable (fi_getinfo(efa): No data available)"), std::string::npos) << o.summary;
  EXPECT_NE(o.fix.find("--device=/dev/infiniband/uverbs0"), std::string::npos) << o.fix;
}

// gpu.visibility on the g5-like fixture (4x A10G, driver 535.183.01, CUDA 12.2), varying the CUDA fact
// and CUDA_VISIBLE_DEVICES the way a capture in that environment would record them.
std::string CudaFact(int n) {
  json m = json::array();
  for (int i = 0; i < n; ++i) m.push_back(std::vector<bool>(static_cast<std::size_t>(n), false));
  return json{{"available", true}, {"device_count", n}, {"can_access_peer", m}}.dump();
}

TEST(GpuChecks, VisibilityNvmlCudaAndVisibleDevicesAgree) {
  const fs::path g5 = Fixture("g5-4gpu-no-p2p");
  CheckOutcome o = RunOne(g5, "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_EQ(o.summary, "4 GPU(s) visible to CUDA of 4 NVML lists; driver 535.183.01, CUDA 12.2");
  EXPECT_TRUE(Has(o.evidence, "NVML: 4 GPU(s): GPU0 (00000000:00:1B.0, NVIDIA A10G), GPU1"));
  EXPECT_TRUE(Has(o.evidence, "CUDA driver API 12.2 (nvmlSystemGetCudaDriverVersion_v2 = 12020)"));
  EXPECT_TRUE(Has(o.evidence, "CUDA: cuDeviceGetCount = 4"));
  EXPECT_TRUE(Has(o.evidence, "CUDA_VISIBLE_DEVICES not set"));

  TempDir d;
  fs::copy(g5, d.path(), fs::copy_options::recursive);
  // A job restricted to two GPUs, by index and by UUID prefix.
  d.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=2,3\n");
  d.Write(".commkit/facts/cuda", CudaFact(2));
  o = RunOne(d.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_EQ(o.summary, "2 GPU(s) visible to CUDA (CUDA_VISIBLE_DEVICES=2,3) of 4 NVML lists; driver 535.183.01, CUDA 12.2");
  d.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=GPU-a10a10a1-0000-0000-0000-000000000003\n");
  d.Write(".commkit/facts/cuda", CudaFact(1));
  EXPECT_EQ(RunOne(d.path(), "gpu.visibility").status, CheckStatus::kPass);

  // An index past the last GPU: CUDA stops there, and the check says which entry.
  d.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=0,1,7,2\n");
  d.Write(".commkit/facts/cuda", CudaFact(2));
  o = RunOne(d.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("entry '7' names no GPU of the 4: CUDA ignores it and every later entry (CUDA sees 2)"), std::string::npos)
      << o.summary;
  EXPECT_EQ(o.fix, "export CUDA_VISIBLE_DEVICES with indices 0..3 or GPU UUIDs from nvidia-smi -L");

  // CUDA_VISIBLE_DEVICES hiding every GPU (cuInit then finds no device).
  d.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=\n");
  d.Write(".commkit/facts/cuda", R"j({"available":false,"error":"cuInit failed with CUDA error 100 (no CUDA-capable device)"})j");
  o = RunOne(d.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("hides all 4 GPUs from CUDA"), std::string::npos) << o.summary;
}

TEST(GpuChecks, VisibilityMismatchesFail) {
  TempDir d;
  fs::copy(Fixture("g5-4gpu-no-p2p"), d.path(), fs::copy_options::recursive);
  // No CUDA_VISIBLE_DEVICES, but CUDA enumerates 3 of the 4 GPUs NVML lists.
  d.Write(".commkit/facts/cuda", CudaFact(3));
  CheckOutcome o = RunOne(d.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_EQ(o.summary.rfind("CUDA sees 3 GPU(s) where NVML lists 4: a GPU the driver lists is unusable by CUDA", 0), 0u) << o.summary;
  EXPECT_NE(o.summary.find("driver 535.183.01, CUDA 12.2"), std::string::npos) << o.summary;
  EXPECT_NE(o.fix.find("dmesg | grep -i Xid"), std::string::npos) << o.fix;

  // NVML works but cuInit fails: an NVSwitch box without fabric manager, say.
  d.Write(".commkit/facts/cuda",
          R"j({"available":false,"error":"cuInit failed with CUDA error 802 (system not yet initialized: is nvidia-fabricmanager running?)"})j");
  o = RunOne(d.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("NVML sees 4 GPU(s) but CUDA cannot use them: cuInit failed with CUDA error 802"), std::string::npos)
      << o.summary;
  EXPECT_EQ(o.fix, "systemctl enable --now nvidia-fabricmanager");

  // The driver lists a GPU that NVML does not (one dropped from the fact): a warning.
  TempDir lost;
  fs::copy(Fixture("g5-4gpu-no-p2p"), lost.path(), fs::copy_options::recursive);
  json nvml = json::parse(std::ifstream(lost.path() / ".commkit/facts/nvml"));
  nvml["gpus"].erase(3);
  lost.Write(".commkit/facts/nvml", nvml.dump());
  lost.Write(".commkit/facts/cuda", CudaFact(3));
  o = RunOne(lost.path(), "gpu.visibility");
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("the driver lists 4 GPUs in /proc/driver/nvidia/gpus but NVML sees 3"), std::string::npos) << o.summary;
  EXPECT_EQ(RunOne(TempDir().path(), "gpu.visibility").status, CheckStatus::kSkip);  // no driver
}

// --- NVML facts written here ---------------------------------------------------------------------

TEST(GpuChecks, SkipWithReasonWithoutDriverOrGpu) {
  TempDir none;
  for (const char* id : {"gpu.nvlink", "gpu.ecc", "gpu.clocks"}) {
    CheckOutcome o = RunOne(none.path(), id);
    EXPECT_EQ(o.status, CheckStatus::kSkip) << id;
    EXPECT_NE(o.summary.find("no NVIDIA driver: "), std::string::npos) << o.summary;
  }
  TempDir nolib;
  nolib.Write(".commkit/facts/nvml", R"({"available":false,"error":"libnvidia-ml.so.1 not found"})");
  EXPECT_EQ(RunOne(nolib.path(), "gpu.ecc").summary, "no NVIDIA driver: libnvidia-ml.so.1 not found");
  TempDir zero;
  WriteNvml(zero, json::array());
  EXPECT_EQ(RunOne(zero.path(), "gpu.clocks").summary, "NVML (driver 550.54.15) reports no GPU");
  EXPECT_EQ(RunOne(none.path(), "net.efa").status, CheckStatus::kSkip);
}

TEST(GpuChecks, NvLinkDirectLinksAsymmetricAndUniformBridges) {
  TempDir d;
  // Two GPUs bridged directly: GPU0 lists 4 links to GPU1, GPU1 only 3 back (one lane of the bridge dead).
  json g0 = Gpu(0), g1 = Gpu(1);
  g0["nvlinks"] = Links(4, {}, "00000000:11:00.0");
  g1["nvlinks"] = Links(4, {3}, "00000000:10:00.0");
  g0["nvlink_remote_bus_ids"] = json::array({"00000000:11:00.0", "00000000:11:00.0", "00000000:11:00.0", "00000000:11:00.0"});
  g1["nvlink_remote_bus_ids"] = json::array({"0000:10:00.0", "0000:10:00.0", "0000:10:00.0"});
  WriteNvml(d, {g0, g1});
  CheckOutcome o = RunOne(d.path(), "gpu.nvlink");
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.summary.find("GPU0 sees 4 link(s) to GPU1 but GPU1 sees 3 back"), std::string::npos) << o.summary;

  // Every GPU with the same two links unwired (a PCIe board with bridges): consistent, passes.
  TempDir u;
  json a = Gpu(0), b = Gpu(1);
  a["nvlinks"] = Links(6, {4, 5});
  b["nvlinks"] = Links(6, {4, 5});
  WriteNvml(u, {a, b});
  o = RunOne(u.path(), "gpu.nvlink");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_EQ(o.summary, "2 GPU(s) with 4 active NVLink(s) each");

  // NVLink-capable GPUs with nothing attached: warn (traffic over PCIe).
  TempDir off;
  a["nvlinks"] = Links(12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  b["nvlinks"] = a["nvlinks"];
  WriteNvml(off, {a, b});
  EXPECT_EQ(RunOne(off.path(), "gpu.nvlink").status, CheckStatus::kWarn);

  // A whole GPU off the fabric (fact from an older prober: active remotes only).
  TempDir old;
  a = Gpu(0);
  b = Gpu(1);
  a["nvlink_remote_bus_ids"] = json::array({"00000000:05:00.0", "00000000:06:00.0"});
  b["nvlink_remote_bus_ids"] = json::array();
  WriteNvml(old, {a, b});
  o = RunOne(old.path(), "gpu.nvlink");
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.summary.find("GPU1 (00000000:11:00.0, NVIDIA H100 80GB HBM3) has 0 active link(s)"), std::string::npos) << o.summary;
}

TEST(GpuChecks, EccModesAndRemapThresholds) {
  auto ecc = [](json gpu) {
    TempDir d;
    WriteNvml(d, json::array({gpu}));
    return RunOne(d.path(), "gpu.ecc");
  };
  json g = Gpu(2);
  g["ecc_enabled"] = false;
  CheckOutcome o = ecc(g);
  EXPECT_EQ(o.status, CheckStatus::kWarn);
  EXPECT_EQ(o.fix, "nvidia-smi -i 2 -e 1 then reboot");
  json consumer = Gpu(0, "NVIDIA GeForce RTX 4090");
  consumer["ecc_enabled"] = false;
  EXPECT_EQ(ecc(consumer).status, CheckStatus::kPass);  // ECC optional off the datacenter
  json fail = Gpu(1, "NVIDIA A100-SXM4-40GB");
  fail["ecc_enabled"] = true;
  fail["remap_failure"] = true;
  fail["remap_pending"] = false;
  o = ecc(fail);
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.fix.find("RMA GPU1"), std::string::npos) << o.fix;
  json many = Gpu(0);
  many["remapped_rows_uncorrectable"] = 80;
  EXPECT_EQ(ecc(many).status, CheckStatus::kWarn);
  many["remapped_rows_uncorrectable"] = 512;
  EXPECT_EQ(ecc(many).status, CheckStatus::kFail);
  EXPECT_EQ(ecc(Gpu(0)).status, CheckStatus::kSkip);  // NVML reported nothing
}

// A real machine: `gpudoctor snapshot` of the H100 VM (Firecracker, driver 580.159.04) that validated
// the NCCL backend on 2026-11-24 (docs/gpu-validation.md). Replayed, every check gives what it gave
// there; the two warnings are real (hostname on loopback, two NCCL libraries: the image's 2.28.3 and
// the torch wheel's 2.28.9).
TEST(GpuChecks, RealH100VmReplaysAsOnTheMachine) {
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(Fixture("h100-vm-firecracker"))}, {});
  std::map<std::string, CheckStatus> got;
  for (const CheckRecord& r : rep.records) got[r.info.id] = r.outcome.status;
  const std::map<std::string, CheckStatus> want = {
      {"gpu.nvml", CheckStatus::kPass},        {"gpu.driver", CheckStatus::kPass},   {"gpu.persistence", CheckStatus::kPass},
      {"gpu.visibility", CheckStatus::kPass},  {"gpu.ecc", CheckStatus::kPass},      {"gpu.clocks", CheckStatus::kPass},
      {"pci.link", CheckStatus::kPass},        {"env.nccl", CheckStatus::kPass},     {"net.nccl_socket", CheckStatus::kPass},
      {"kernel.xid", CheckStatus::kPass},      {"net.hostname", CheckStatus::kWarn}, {"nccl.libs", CheckStatus::kWarn},
      {"gpu.nvlink", CheckStatus::kSkip},      {"p2p.acs", CheckStatus::kSkip},      {"net.efa", CheckStatus::kSkip}};
  for (const auto& [id, status] : want) {
    ASSERT_TRUE(got.count(id)) << id;
    EXPECT_EQ(got[id], status) << id;
  }
  EXPECT_EQ(rep.ExitCode(), 1);
}

// The H100 VM of docs/gpu-validation.md: /proc/driver/nvidia/gpus/*/information has no
// "Persistence" line, so the answer comes from NVML.
TEST(GpuChecks, PersistenceFromNvmlWhenProcOmitsIt) {
  auto persistence = [](std::optional<bool> on) {
    TempDir d;
    d.Write("proc/driver/nvidia/gpus/0000:00:06.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 33\n");
    json g = Gpu(0);
    if (on) g["persistence_mode"] = *on;
    WriteNvml(d, json::array({g}));
    return RunOne(d.path(), "gpu.persistence");
  };
  CheckOutcome o = persistence(true);
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_TRUE(Has(o.evidence, "NVML nvmlDeviceGetPersistenceMode: GPU0 (00000000:10:00.0) enabled"));
  o = persistence(false);
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("GPU0 (00000000:10:00.0)"), std::string::npos) << o.summary;
  o = persistence(std::nullopt);
  EXPECT_EQ(o.status, CheckStatus::kSkip);
  EXPECT_NE(o.summary.find("nor by NVML"), std::string::npos) << o.summary;
}

TEST(GpuChecks, ClockReasonsDecoded) {
  auto clocks = [](std::uint64_t mask) {
    TempDir d;
    json g = Gpu(0);
    g["clocks_event_reasons"] = mask;
    WriteNvml(d, json::array({g}));
    return RunOne(d.path(), "gpu.clocks");
  };
  CheckOutcome o = clocks(0x20);
  EXPECT_EQ(o.status, CheckStatus::kWarn);
  EXPECT_TRUE(Has(o.evidence, "0x20 = SwThermalSlowdown"));
  o = clocks(0x80);
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_NE(o.fix.find("PSUs"), std::string::npos) << o.fix;
  EXPECT_EQ(clocks(0x40).status, CheckStatus::kFail);
  EXPECT_EQ(clocks(0x4).status, CheckStatus::kPass);   // power cap: normal under load
  EXPECT_EQ(clocks(0x13).status, CheckStatus::kPass);  // idle | app clocks | sync boost
  o = clocks(0x1001);
  EXPECT_EQ(o.status, CheckStatus::kPass);
  EXPECT_TRUE(Has(o.evidence, "0x1001 = GpuIdle | unknown bits 0x1000"));
  EXPECT_TRUE(Has(clocks(0).evidence, "0x0 = None"));
}

TEST(GpuChecks, TopologyProbedOncePerContext) {
  TempDir d;
  WriteNvml(d, json::array({Gpu(0)}));
  CheckContext ctx{SystemView::Replay(d.path())};
  CheckContext copy = ctx;
  const auto* first = &ctx.topology();
  EXPECT_EQ(first, &copy.topology());
  EXPECT_TRUE(first->ok());
  // Changing the machine after the first probe does not change this run's view of it.
  WriteNvml(d, json::array({Gpu(0), Gpu(1)}));
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"p2p.acs"}, {}});
  ASSERT_EQ(rep.records.size(), 1u);
  EXPECT_NE(rep.records[0].outcome.summary.find("1 GPU(s)"), std::string::npos) << rep.records[0].outcome.summary;
}

}  // namespace
}  // namespace commkit::diagnostics
