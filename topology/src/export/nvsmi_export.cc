// nvidia-smi topo -m style matrix text.
#include "commkit/common/strings.h"
#include "commkit/topology/export.h"

namespace commkit::topology {
namespace {

constexpr const char* kLegend =
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

}  // namespace

std::string ExportNvsmiMatrix(const Topology& topo, const NvsmiExportOptions& options) {
  const PathMatrix m = ComputePaths(topo, options.paths);
  std::vector<std::string> names = m.labels();
  std::vector<std::pair<std::string, std::string>> legend;
  std::size_t nic = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (topo.node(m.endpoints()[i]).kind == NodeKind::kNic && options.nic_legend) {
      std::string alias = StrCat("NIC", nic++);
      legend.emplace_back(alias, names[i]);
      names[i] = alias;
    }
  }
  // Affinity per GPU: explicit entries first, else from the CPU node above the GPU.
  auto affinity = [&](NodeId id) {
    GpuAffinity a;
    for (const auto& e : topo.gpu_affinities()) {
      if (e.gpu == id) return e;
    }
    const NodeId cpu = topo.CpuOf(id);
    if (cpu != kNoNode) {
      const CpuInfo& c = topo.node(cpu).cpu;
      a.cpu_affinity = !c.affinity_list.empty() ? c.affinity_list : (c.affinity_mask.empty() ? "N/A" : c.affinity_mask);
      a.numa_affinity = c.numa_id >= 0 ? std::to_string(c.numa_id) : "N/A";
    } else {
      a.cpu_affinity = "N/A";
      a.numa_affinity = "N/A";
    }
    return a;
  };
  // Keep the columns the source had (nvidia-smi versions differ); a tree-built topology gets both.
  bool numa_column = topo.gpu_affinities().empty();
  for (const auto& e : topo.gpu_affinities()) numa_column |= !e.numa_affinity.empty();
  std::string out;
  for (const auto& n : names) out += "\t" + n;
  out += numa_column ? "\tCPU Affinity\tNUMA Affinity\n" : "\tCPU Affinity\n";
  for (std::size_t i = 0; i < m.size(); ++i) {
    out += names[i];
    for (std::size_t j = 0; j < m.size(); ++j) {
      out += "\t";
      out += i == j ? " X " : m.at(i, j).Label();
    }
    if (topo.node(m.endpoints()[i]).kind == NodeKind::kGpu) {
      const GpuAffinity a = affinity(m.endpoints()[i]);
      out += StrCat("\t", a.cpu_affinity.empty() ? "N/A" : a.cpu_affinity);
      if (numa_column) out += StrCat("\t", a.numa_affinity.empty() ? "N/A" : a.numa_affinity);
    }
    out += "\n";
  }
  if (options.legend) out += StrCat("\n", kLegend);
  if (!legend.empty()) {
    out += "\nNIC Legend:\n\n";
    for (const auto& [alias, name] : legend) out += StrCat("  ", alias, ": ", name, "\n");
  }
  return out;
}

}  // namespace commkit::topology
