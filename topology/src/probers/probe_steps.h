// The steps ProbeTopology (probe_topology.cc) runs, one per source, each defined beside its prober:
//   gpu_prober.cc      NVML / CUDA facts; GPUs only NVML saw, NVLinks, P2P overrides
//   pci_prober.cc      /proc/cpuinfo, DMI, NUMA nodes, IOMMU; the /sys/bus/pci/devices tree
//   netif_prober.cc    interfaces and addresses, named onto the NIC nodes
//   rdma_prober.cc     /sys/class/infiniband ports and GIDs, GPUDirect modules, uverbs, net plugin
//   verbs_convert.cc   the libibverbs fact      fabric_convert.cc  the libfabric fact
//   locality_merge.cc  the hwloc facts
// They share one ProbeContext: the report being filled and the node lookups the earlier steps made.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "commkit/common/status.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/probe.h"

namespace commkit::topology {

struct ProbeContext {
  const SystemView& view;
  ProbeReport& report;
  std::map<int, NodeId> cpu_of_numa;          // CPU node per NUMA id (-1: unknown), from the pci step
  std::map<std::string, NodeId> node_of_bdf;  // canonical bus id -> node

  // Records a prober's outcome; anything but kOk is a warning too.
  void AddStatus(std::string name, ProberState state, std::string detail);
  // The first CPU node (where devices without a known place hang), kNoNode before the pci step.
  NodeId FirstCpu() const { return cpu_of_numa.empty() ? kNoNode : cpu_of_numa.begin()->second; }
};

// A fact a replay does not have means the prober was skipped; one that is there but unreadable
// (a FIFO, a corrupt value: SystemView checks facts against their schema) means it failed.
ProberState FactState(const Status& status);
std::string FactDetail(const Status& status);
// A sysfs attribute, empty when unreadable.
std::string Attr(const SystemView& view, const std::string& path);
int ToInt(const std::string& text, int fallback = 0);
// "0000:3b:00.0"
bool LooksLikeBdf(std::string_view text);

void ProbeNvmlFact(ProbeContext& ctx);
void ProbeCudaFact(ProbeContext& ctx);
void ProbeCpusAndNuma(ProbeContext& ctx);
void ProbePciTree(ProbeContext& ctx);
void AddGpuRuntimeLinks(ProbeContext& ctx);
void ProbeNetworkInterfaces(ProbeContext& ctx);
void ProbeRdmaSysfs(ProbeContext& ctx);
void ProbeVerbsFact(ProbeContext& ctx);
void ProbeLibfabricFact(ProbeContext& ctx);
void ProbeHwlocFacts(ProbeContext& ctx);

}  // namespace commkit::topology
