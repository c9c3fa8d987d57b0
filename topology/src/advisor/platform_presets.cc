#include "platform_presets.h"

#include <algorithm>

#include "commkit/common/strings.h"

namespace commkit::topology::internal {
namespace {

// Where each vendor publishes its settings. Azure: the HPC images write /etc/nccl.conf per size.
constexpr const char* kAzureNdv2 = "https://github.com/Azure/azhpc-images/blob/master/customizations/ndv2.sh";
constexpr const char* kAzureNdv4 = "https://github.com/Azure/azhpc-images/blob/master/customizations/ndv4.sh";
constexpr const char* kAzureNdv5 = "https://github.com/Azure/azhpc-images/blob/master/customizations/ndv5.sh";
// AWS: the EFA cheatsheet of the aws-samples distributed-training reference, and the aws-ofi-nccl
// plugin's platform table (it loads its own topology file for p4d/p4de/p5).
constexpr const char* kAwsCheatsheet =
    "https://github.com/aws-samples/awsome-distributed-training/blob/main/1.architectures/efa-cheatsheet.md";
constexpr const char* kAwsOfiPlatform = "https://github.com/aws/aws-ofi-nccl/blob/master/src/platform-aws.c";
// GCP: A3 High (GPUDirect-TCPX) and A3 Mega (GPUDirect-TCPXO) setup guides.
constexpr const char* kGcpTcpx = "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx";
constexpr const char* kGcpTcpxo = "https://cloud.google.com/cluster-toolkit/docs/machine-learning/a3-mega-enable-gpudirect-tcpxo";
constexpr const char* kGcpTcpxoEnv = "https://docs.nvidia.com/dgx-cloud/run-ai/1.2/appendix-gcp.html";

enum class Cloud { kUnknown, kAws, kAzure, kGcp };

// "A100", "H100", "H200", "V100", "" from NVML names, model names or PCI device ids.
std::string GpuFamily(const ProbeReport& r) {
  std::vector<std::string> names;
  for (const auto& g : r.gpu.gpus) names.push_back(g.name);
  for (NodeId id : r.topology.Gpus()) {
    const Node& n = r.topology.node(id);
    names.push_back(n.gpu.name);
    const std::string dev = ToLower(n.pci.device_id);
    if (dev == "0x20b0" || dev == "0x20b2" || dev == "0x20b5" || dev == "0x20f1") names.emplace_back("A100");
    if (dev == "0x2330" || dev == "0x2331") names.emplace_back("H100");
    if (dev == "0x2335") names.emplace_back("H200");
    if (dev == "0x1db1" || dev == "0x1db5" || dev == "0x1db4") names.emplace_back("V100");
  }
  for (const char* family : {"H200", "H100", "A100", "V100"})
    for (const auto& n : names)
      if (n.find(family) != std::string::npos) return family;
  return "";
}

struct NicCounts {
  int ib = 0, efa = 0, gvnic = 0;
  std::vector<std::string> gvnic_netdevs;
};

NicCounts CountNics(const ProbeReport& r) {
  NicCounts c;
  for (NodeId id : r.topology.Nics()) {
    const Node& n = r.topology.node(id);
    if (n.nic.kind == NicKind::kInfiniBand) ++c.ib;
    if (n.nic.kind == NicKind::kEfa) ++c.efa;
    if (ToLower(n.pci.vendor_id) == "0x1ae0") {  // Google gVNIC
      ++c.gvnic;
      for (const auto& d : n.nic.netdevs) c.gvnic_netdevs.push_back(d);
    }
  }
  return c;
}

// Hyper-V's virtual PCI gives every passed-through device its own domain at bus 00 device 00
// ("0001:00:00.0"), which no bare-metal machine does for eight GPUs.
bool HyperVPciLayout(const ProbeReport& r) {
  const auto gpus = r.topology.Gpus();
  if (gpus.size() < 2) return false;
  return std::all_of(gpus.begin(), gpus.end(), [&](NodeId id) {
    const std::string& b = r.topology.node(id).pci.bus_id;
    return b.size() == 12 && b.substr(4) == ":00:00.0" && b.substr(0, 4) != "0000";
  });
}

Cloud CloudOf(const ProbeReport& r, const NicCounts& nics, std::string& evidence) {
  const std::string& vendor = r.system.dmi_sys_vendor;
  if (vendor == "Amazon EC2") {
    evidence = StrCat("DMI sys_vendor '", vendor, "'");
    return Cloud::kAws;
  }
  if (vendor == "Microsoft Corporation") {
    evidence = StrCat("DMI sys_vendor '", vendor, "'");
    return Cloud::kAzure;
  }
  if (vendor == "Google" || r.system.dmi_product_name == "Google Compute Engine") {
    evidence = StrCat("DMI '", vendor, " ", r.system.dmi_product_name, "'");
    return Cloud::kGcp;
  }
  if (!vendor.empty()) return Cloud::kUnknown;  // another machine that says what it is
  if (nics.efa > 0) {
    evidence = StrCat(nics.efa, " EFA NIC(s) (AWS-only devices)");
    return Cloud::kAws;
  }
  if (HyperVPciLayout(r)) {
    evidence = "each GPU on its own PCI domain at 00:00.0 (Hyper-V virtual PCI)";
    return Cloud::kAzure;
  }
  return Cloud::kUnknown;
}

std::optional<PlatformMatch> Azure(const ProbeReport& r, const NicCounts& nics, const std::string& how) {
  const std::size_t gpus = r.topology.GpuCount();
  if (gpus != 8) return std::nullopt;
  std::string family = GpuFamily(r);
  const auto cpus = r.topology.Cpus();
  const bool amd = r.system.cpu_vendor == "AuthenticAMD" || std::any_of(cpus.begin(), cpus.end(), [&](NodeId id) {
                     return r.topology.node(id).cpu.vendor == "AuthenticAMD";
                   });
  // Azure's own topology files carry no device ids: ND A100 v4 is the 8-GPU, 8-HCA size on AMD EPYC,
  // ND H100 v5 the one on Intel Sapphire Rapids.
  if (family.empty() && nics.ib == 8) family = amd ? "A100" : "H100";
  if (family.empty() && nics.ib <= 1) family = "V100";
  PlatformMatch m;
  std::string dir, source;
  if (family == "A100" && nics.ib == 8) {
    m.name = "Azure ND A100 v4 (ND96asr_v4 / ND96amsr_A100_v4)";
    dir = "ndv4";
    source = kAzureNdv4;
  } else if ((family == "H100" || family == "H200") && nics.ib == 8) {
    m.name = family == "H100" ? "Azure ND H100 v5 (ND96isr_H100_v5)" : "Azure ND H200 v5 (ND96isr_H200_v5)";
    dir = "ndv5";
    source = kAzureNdv5;
  } else if (family == "V100") {
    m.name = "Azure NDv2 (ND40rs_v2)";
    dir = "ndv2";
    source = kAzureNdv2;
  } else {
    return std::nullopt;
  }
  m.evidence = StrCat(how, "; ", gpus, " ", family, " GPUs, ", nics.ib, " InfiniBand HCA(s)");
  m.settings.push_back({"NCCL_TOPO_FILE", StrCat("/opt/microsoft/", dir, "/topo.xml"),
                        "the VM hides the PCIe tree; Azure's HPC image ships this size's topology file (copy it from an "
                        "Azure HPC image if yours lacks it)",
                        source});
  if (dir != "ndv2")
    m.settings.push_back({"NCCL_IB_PCI_RELAXED_ORDERING", "1",
                          "PCIe relaxed ordering for the InfiniBand HCAs in the VM (GPUDirect RDMA bandwidth)", source});
  m.settings.push_back({"NCCL_IGNORE_CPU_AFFINITY", "1",
                        "the VM's vCPU affinity does not describe the GPUs' NUMA nodes; the topology file does", source});
  m.notes.push_back(StrCat("Azure writes these to /etc/nccl.conf on its HPC images; nvidia-peermem must be loaded (", source, ")"));
  return m;
}

std::optional<PlatformMatch> Aws(const ProbeReport& r, const NicCounts& nics, const std::string& how) {
  const std::string& product = r.system.dmi_product_name;
  const std::string family = GpuFamily(r);
  PlatformMatch m;
  if (product == "p4d.24xlarge" || product == "p4de.24xlarge" || product == "p5.48xlarge" || product == "p5e.48xlarge" ||
      product == "p5en.48xlarge") {
    m.name = StrCat("AWS ", product);
    m.evidence = StrCat("DMI product_name '", product, "'");
  } else if (product.empty() && r.topology.GpuCount() == 8 && nics.efa == 4 && (family == "A100" || family.empty())) {
    m.name = "AWS p4d.24xlarge / p4de.24xlarge";
    m.evidence = StrCat(how, "; 8 ", family.empty() ? "" : "A100 ", "GPUs + 4 EFA NICs");
  } else if (product.empty() && r.topology.GpuCount() == 8 && nics.efa >= 16) {
    m.name = "AWS p5.48xlarge / p5e.48xlarge";
    m.evidence = StrCat(how, "; 8 GPUs + ", nics.efa, " EFA NICs");
  } else {
    return std::nullopt;
  }
  m.settings.push_back({"FI_PROVIDER", "efa", "libfabric must use the efa provider (required with aws-ofi-nccl <= 1.5.0 on p4/p5, harmless later)",
                        kAwsCheatsheet});
  m.settings.push_back({"FI_EFA_USE_DEVICE_RDMA", "1",
                        "GPUDirect RDMA over EFA (required with aws-ofi-nccl 1.6.x; libfabric >= 1.18 with aws-ofi-nccl >= 1.7 turn it on themselves)",
                        kAwsCheatsheet});
  m.settings.push_back({"FI_EFA_USE_HUGE_PAGE", "0",
                        "in every AWS preset: avoids 'OSError: Cannot allocate memory' from os.fork() (PyTorch data loader "
                        "workers) at a minor performance cost",
                        kAwsCheatsheet});
  m.notes.push_back(StrCat("with aws-ofi-nccl <= 1.5.0 also set NCCL_PROTO=simple (EFA delivers out of order); later plugins do not need it (",
                           kAwsCheatsheet, ")"));
  m.notes.push_back(StrCat("the aws-ofi-nccl plugin loads its own topology file for this instance type: leave NCCL_TOPO_FILE unset (",
                           kAwsOfiPlatform, ")"));
  return m;
}

std::optional<PlatformMatch> Gcp(const ProbeReport& r, const NicCounts& nics, const std::string& how) {
  const std::string family = GpuFamily(r);
  if (r.topology.GpuCount() != 8 || (family != "H100" && family != "H200" && !family.empty())) return std::nullopt;
  // A3 High: 1 control + 4 data gVNICs (GPUDirect-TCPX); A3 Mega: 1 + 8 (GPUDirect-TCPXO).
  const bool mega = nics.gvnic >= 9;
  if (!mega && nics.gvnic != 5) return std::nullopt;
  PlatformMatch m;
  m.name = mega ? "GCP A3 Mega (a3-megagpu-8g)" : "GCP A3 High (a3-highgpu-8g)";
  m.evidence = StrCat(how, "; 8 ", family.empty() ? "" : family + " ", "GPUs + ", nics.gvnic, " gVNIC NICs");
  // The control NIC carries the default route; the others are the data NICs. Interface names from
  // the probe when it saw them, else the guides' eth0..ethN.
  std::string ctrl;
  for (const auto& rt : r.network.routes)
    if (rt.is_default() && rt.family == AddressFamily::kIPv4) {
      ctrl = rt.ifname;
      break;
    }
  std::vector<std::string> data;
  for (const auto& d : nics.gvnic_netdevs)
    if (d != ctrl) data.push_back(d);
  std::sort(data.begin(), data.end());
  if (ctrl.empty() || data.size() + 1 != static_cast<std::size_t>(nics.gvnic)) {
    ctrl = "eth0";
    data.clear();
    for (int i = 1; i < nics.gvnic; ++i) data.push_back(StrCat("eth", i));
  }
  const std::string source = mega ? kGcpTcpxo : kGcpTcpx;
  m.settings.push_back({"NCCL_SOCKET_IFNAME", ctrl, "bootstrap over the control gVNIC", source});
  if (mega) {
    m.settings.push_back({"NCCL_FASTRAK_CTRL_DEV", ctrl, "GPUDirect-TCPXO control NIC", kGcpTcpxoEnv});
    m.settings.push_back({"NCCL_FASTRAK_IFNAME", Join(data, ","), "GPUDirect-TCPXO data NICs", kGcpTcpxoEnv});
    m.settings.push_back({"NCCL_NVLS_ENABLE", "0", "in Google's TCPXO environment", kGcpTcpxoEnv});
  } else {
    m.settings.push_back({"NCCL_GPUDIRECTTCPX_CTRL_DEV", ctrl, "GPUDirect-TCPX control NIC", source});
    m.settings.push_back({"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", Join(data, ","), "GPUDirect-TCPX data NICs", source});
    m.settings.push_back({"NCCL_P2P_PXN_LEVEL", "0", "in Google's TCPX environment", source});
  }
  m.settings.push_back({"NCCL_CROSS_NIC", "0", "keep each ring on one NIC index across nodes (A3 rails)", mega ? kGcpTcpxoEnv : source});
  m.settings.push_back({"NCCL_NET_GDR_LEVEL", "PIX", "GPUDirect only for the NIC under the GPU's own PCIe switch",
                        mega ? kGcpTcpxoEnv : source});
  m.notes.push_back(StrCat("these variables take effect only with Google's GPUDirect-", mega ? "TCPXO" : "TCPX",
                           " NCCL net plugin and its receive-datapath manager running on the host (", source, ")"));
  return m;
}

}  // namespace

std::optional<PlatformMatch> RecognisePlatform(const ProbeReport& report) {
  const NicCounts nics = CountNics(report);
  std::string how;
  switch (CloudOf(report, nics, how)) {
    case Cloud::kAws: return Aws(report, nics, how);
    case Cloud::kAzure: return Azure(report, nics, how);
    case Cloud::kGcp: return Gcp(report, nics, how);
    case Cloud::kUnknown: break;
  }
  return std::nullopt;
}

}  // namespace commkit::topology::internal
