// commkit-topo cores: core-to-core round-trip latency between CPUs of this machine
// (commkit/topology/core_latency.h), as a matrix or JSON.
#pragma once

#include <vector>

struct TopoCoresArgs {
  std::vector<int> cpus;  // empty: the CPUs this process may run on
  int round_trips = 20000;
  bool json = false;
};

// Measures and prints; returns the tool's exit code (0; 1 for a usage error such as an unknown CPU or
// fewer than two CPUs; 2 when a pair could not be measured), with the reason on stderr.
int RunTopoCores(const TopoCoresArgs& args);
