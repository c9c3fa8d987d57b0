// commkit-topo plan: which algorithm each backend's selection table runs at each size, and why,
// with the network link taken from the probed (or replayed) topology (docs/tuning.md).
#pragma once

#include <string>
#include <vector>

#include "commkit/topology/probe.h"

struct TopoPlanArgs {
  std::vector<std::string> backends = {"host", "gloo", "mpi"};
  std::string collective = "allreduce";
  int ranks = 2;
  int nodes = 1;
  int ranks_per_node = 0;  // 0: ranks / nodes, rounded up
  std::string min_size = "8", max_size = "64M";
  bool json = false;
};

// Prints the plan; returns the tool's exit code (0, or 1 for a usage error such as a bad size or a
// malformed COMMKIT_TUNE, with the reason on stderr).
int RunTopoPlan(const TopoPlanArgs& args, const commkit::topology::ProbeReport& report);
