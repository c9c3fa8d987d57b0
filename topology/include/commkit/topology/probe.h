// Live topology probing: sysfs PCI tree, NUMA/CPU, network interfaces and routes, InfiniBand/RoCE/EFA
// ports and GID tables, GPUDirect modules, NVML and the CUDA driver (both dlopen'ed), all read through
// a SystemView so `SystemView::StartCapture` records exactly what was read and `SystemView::Replay`
// reproduces it (NVML and CUDA answers are the JSON facts "nvml" and "cuda"; hwloc's view is the facts
// "hwloc" (status JSON) and "hwloc.xml" (the hwloc v2 XML it exported, loadable by `lstopo -i`)).
//
// Every prober degrades instead of failing: a missing file, library or permission becomes a warning
// and a ProberStatus (kSkipped/kFailed with the reason); ProbeTopology fails only on programmer
// errors. Blocking: reads files and calls NVML/CUDA once; no waits. Thread-safe for distinct views.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/model.h"
#include "commkit/topology/netif.h"

namespace commkit::topology {

struct ProbeOptions {
  bool pci = true;         // /sys/bus/pci/devices tree, NUMA nodes, CPU info, IOMMU
  bool network = true;     // /sys/class/net, getifaddrs, routes
  bool rdma = true;        // /sys/class/infiniband, GPUDirect modules, /dev/infiniband
  bool nvml = true;        // libnvidia-ml.so.1
  bool cuda = true;        // libcuda.so.1 (cuDeviceCanAccessPeer)
  bool verbs = true;       // libibverbs (ports, GID types) merged where sysfs is silent; see verbs.h
  bool libfabric = true;   // libfabric fi_getinfo for the efa provider; see libfabric.h
  // hwloc (hwloc.h): NUMA nodes with memory, packages, CPU sets, and the NUMA locality of PCI
  // devices where sysfs says numa_node -1, merged into what the sysfs walker found. On by default;
  // a build without hwloc records "not built with hwloc" live and still replays captured facts.
  bool hwloc = true;
};

enum class ProberState : std::uint8_t { kOk, kSkipped, kFailed };
std::string_view ToString(ProberState state);

struct ProberStatus {
  std::string name;    // "pci", "network", "rdma", "nvml", "cuda", "verbs", "libfabric", "hwloc"
  ProberState state = ProberState::kOk;
  std::string detail;  // "skipped: libnvidia-ml.so.1 not found"
};

// One populated GID table entry of an RDMA port.
struct GidEntry {
  std::string device;  // mlx5_0
  int port = 1;
  int index = 0;
  std::string gid;     // "0000:0000:0000:0000:0000:ffff:0a01:0203"
  std::string type;    // "IB/RoCE v1", "RoCE v2"
  std::string ndev;    // eth0 (RoCE only)
  bool ipv4_mapped() const;  // ::ffff:a.b.c.d
};

struct NvmlGpu {
  int index = 0;
  std::string name, uuid, bus_id;
  std::uint64_t memory_bytes = 0;
  int sm = 0;
  std::optional<bool> persistence_mode;
  std::optional<bool> ecc_enabled;
  std::optional<unsigned> remapped_rows_uncorrectable;
  std::optional<bool> remap_pending;
  std::optional<bool> remap_failure;
  std::optional<std::uint64_t> clocks_event_reasons;
  int pcie_gen = 0, pcie_width = 0, pcie_max_gen = 0, pcie_max_width = 0;
  std::vector<std::string> nvlink_remote_bus_ids;  // one per active link
  // Every NVLink index NVML reports a state for (the links this GPU has; unsupported indices are
  // left out), active or not. Empty when NVML gave no state (PCIe-only GPU, or an older fact).
  struct NvLink {
    int link = 0;
    bool active = false;
    std::string remote_bus_id;  // active links only, when NVML reports it
  };
  std::vector<NvLink> nvlinks;
};

struct GpuRuntimeInfo {
  bool nvml_available = false;
  std::string nvml_error;           // why not ("libnvidia-ml.so.1 not found")
  std::string driver_version;       // "550.54.15"
  int cuda_driver_version = 0;      // 12040
  std::vector<NvmlGpu> gpus;
  // p2p_read[i][j]: nvmlDeviceGetP2PStatus(READ) as text ("OK", "NS", "CNS", "GNS", "TNS", "DR", "U").
  std::vector<std::vector<std::string>> p2p_read;
  bool cuda_available = false;
  std::string cuda_error;
  // can_access_peer[i][j] from cuDeviceCanAccessPeer (i != j).
  std::vector<std::vector<bool>> can_access_peer;
  // True when some pair of distinct GPUs has no peer access per NVML or CUDA.
  bool AnyPairWithoutP2p() const;
};

struct SystemInfo {
  bool iommu_present = false;        // /sys/class/iommu non-empty
  bool iommu_passthrough = false;    // iommu=pt on the kernel command line
  int iommu_groups = 0;
  std::vector<std::string> acs_enabled_bridges;  // bridges whose ACS control enables redirect
  bool hypervisor = false;           // cpuinfo "hypervisor" flag
  bool pci_tree_flat = false;        // GPUs/NICs sit directly on root buses (VM without switches)
  bool numa_unknown = false;         // devices report numa_node -1
  bool nvswitch_present = false;     // 10de class 0x0680
  bool nvidia_peermem = false;       // /sys/module/nvidia_peermem
  bool nv_peer_mem = false;          // /sys/kernel/mm/memory_peers/nv_mem (MLNX OFED module)
  std::string nv_peer_mem_version;
  std::vector<std::string> uverbs;   // /dev/infiniband/uverbs*
  bool efa_present = false;
  std::string ofi_nccl_plugin;       // the net plugin NCCL would load (nccl_libraries.h), else an installed
                                     // libnccl-net*.so it would not load; empty when none is found
  bool ofi_nccl_plugin_loadable = false;  // ofi_nccl_plugin is what NCCL loads (not merely installed)
  std::string cpu_vendor, cpu_model;
  std::string dmi_sys_vendor;        // /sys/class/dmi/id/sys_vendor ("Amazon EC2", "Microsoft Corporation", "Google")
  std::string dmi_product_name;      // /sys/class/dmi/id/product_name ("p5.48xlarge", "Virtual Machine", "Google Compute Engine")
  std::string kernel_cmdline;
  int packages = 0;                  // CPU packages (sockets) per hwloc; 0 unknown
  std::string hwloc_version;         // hwloc library that produced the "hwloc" fact ("2.9.0"); empty if none
};

// One NUMA node: CPUs and memory, merged from sysfs (/sys/devices/system/node) and hwloc.
struct NumaNodeInfo {
  int os_index = -1;
  int package = -1;                  // os_index of the package (socket) holding it; -1 unknown
  std::string cpulist;               // "0-23,48-71"
  std::uint64_t memory_bytes = 0;    // local memory; 0 unknown
  std::string source;                // "sysfs", "hwloc", "sysfs+hwloc"
};

// NUMA/CPU locality of one GPU, NIC or NVSwitch, with where it came from.
struct DeviceLocality {
  std::string bus_id;                // canonical
  std::string label;                 // "GPU0", "eth0"
  int numa_id = -1;                  // -1: unknown (sysfs numa_node -1 and hwloc could not tell)
  std::string cpulist;               // CPUs close to the device ("0-23"); empty unknown
  std::string source;                // "sysfs", "hwloc", or "" when unknown
};

struct ProbeReport {
  Topology topology;
  NetworkInfo network;
  std::vector<GidEntry> gids;
  GpuRuntimeInfo gpu;
  SystemInfo system;
  std::vector<NumaNodeInfo> numa;          // by os_index
  std::vector<DeviceLocality> locality;    // GPUs, NICs and NVSwitches, in topology order
  std::vector<std::string> warnings;
  std::vector<ProberStatus> probers;
  const ProberStatus* Prober(std::string_view name) const;
  const DeviceLocality* LocalityOf(std::string_view bus_id) const;
  const NumaNodeInfo* Numa(int os_index) const;
};

Result<ProbeReport> ProbeTopology(const SystemView& view, const ProbeOptions& options = {});

// Fact producers (live): JSON text describing what the library answered; never fail (a missing
// library is recorded as {"available": false, "error": ...} so replay is exact).
std::string NvmlFact();
std::string CudaFact();
// Parsers for those facts (also used by tests that write facts by hand).
Status ParseNvmlFact(std::string_view json, GpuRuntimeInfo& out);
Status ParseCudaFact(std::string_view json, GpuRuntimeInfo& out);

}  // namespace commkit::topology
