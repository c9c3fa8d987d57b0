// The local launcher behind commkit-run: spawns ranks, prefixes their output, propagates failure.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::run {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: the hosted store picks a free port (single node only)
  bool host_store = true;  // node 0 hosts the TcpStore server for the job
  std::chrono::milliseconds grace{5000};    // after the first failure, before SIGTERM to the others
  std::chrono::milliseconds kill_after{5000};  // after SIGTERM, before SIGKILL
  std::chrono::milliseconds timeout{0};     // whole job (0 = none)
  bool prefix = true;
  std::vector<std::string> command;
};

struct RankExit {
  int rank = -1;
  int exit_code = 0;   // for a normal exit
  int signal = 0;      // when killed by a signal
  bool stopped_by_us = false;
  std::chrono::steady_clock::time_point when;
};

struct LaunchResult {
  int exit_code = 0;  // what commkit-run exits with
  std::string summary;
  std::vector<RankExit> exits;
};

// Runs the job to completion (bounded by the options). Errors only for launcher problems (cannot
// fork, cannot start the store); rank failures are reported in the result.
Result<LaunchResult> RunLocalRanks(const LaunchOptions& options);

}  // namespace commkit::run
