// Exporters: render a Topology for people and other tools. Pure functions, thread-safe.
#pragma once

#include <string>

#include "commkit/common/status.h"

#include "commkit/topology/model.h"
#include "commkit/topology/path.h"

namespace commkit::topology {

struct NvsmiExportOptions {
  // true: NICs as NIC0.. columns plus a "NIC Legend" (newer drivers); false: NIC names as columns.
  bool nic_legend = true;
  bool legend = true;   // append the path legend
  PathOptions paths;
};

// An `nvidia-smi topo -m`-style matrix: tab-separated GPU x GPU x NIC cells from ComputePaths(),
// CPU Affinity / NUMA Affinity columns (from GpuAffinity entries or the GPUs' CPU nodes), legend.
// ImportNvsmiMatrix(ExportNvsmiMatrix(t)) yields the same matrix.
std::string ExportNvsmiMatrix(const Topology& topo, const NvsmiExportOptions& options = {});

// NCCL topology XML (NCCL_TOPO_FILE format, <system version="1">) with every attribute the model
// knows (cpu numaid/affinity/arch/vendor/familyid/modelid, pci class/vendor/device/link, gpu
// dev/sm/rank/gdr + nvlink, nic/net) so NCCL does not have to read them from sysfs. NotSupported,
// naming each GPU, when a GPU has no PCI bus id or no CPU above it (nvidia-smi text records neither),
// or when there is no CPU at all: such a file would describe another machine or be an empty <system>.
// ImportNcclXml(*ExportNcclXml(t)) gives the same devices and paths.
Result<std::string> ExportNcclXml(const Topology& topo);

// Graphviz DOT: nodes by kind (CPU/switch/GPU/NIC/NVSwitch), PCIe tree edges labelled
// "PCIe Gen4 x16 31.5 GB/s", NVLink/C2C/SMP edges labelled with type and GB/s.
std::string ExportDot(const Topology& topo);

// Self-contained SVG (no external program): layered layout with CPUs on top, host bridges and
// switches below by tree depth, GPUs/NICs/other devices in the bottom row, NVSwitches beneath;
// edges labelled with link type and GB/s.
std::string ExportSvg(const Topology& topo);

}  // namespace commkit::topology
