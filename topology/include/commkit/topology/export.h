// Exporters: render a Topology for people and other tools. Pure functions, thread-safe.
#pragma once

#include <string>

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

}  // namespace commkit::topology
