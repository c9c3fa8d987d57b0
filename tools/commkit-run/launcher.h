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
  // Other nodes: how long to look for node 0's store. Node 0: how long to keep the store up for
  // nodes still running after its own ranks are done (like torchrun's exit barrier).
  std::chrono::milliseconds store_timeout{300'000};
  std::chrono::milliseconds exit_barrier{300'000};
  // Leave the signal handlers of libraries the ranks may load (PSM, PSM2, UCX) in place. By default
  // they are disabled through the libraries' own variables, so a rank's SIGSEGV is reported as one.
  bool keep_library_signal_handlers = false;
  std::vector<std::string> command;
};

struct RankExit {
  int rank = -1;
  int exit_code = 0;   // for a normal exit
  int signal = 0;      // when killed by a signal
  bool stopped_by_us = false;
  bool killed_by_us = false;       // needed SIGKILL after SIGTERM: unresponsive
  int reported_signal = 0;         // a library's handler reported this signal before the rank exited
  std::chrono::steady_clock::time_point when;
};

struct LaunchResult {
  int exit_code = 0;  // what commkit-run exits with
  std::string summary;
  std::vector<RankExit> exits;
};

// Environment variables that keep libraries' signal handlers from turning a rank's crash into an
// ordinary exit (set for the ranks unless the user set them): name, value.
const std::vector<std::pair<std::string, std::string>>& LibrarySignalHandlerVariables();

// The signal a library's handler says it caught, from a rank's last stderr output ("Caught signal 11
// (Segmentation fault: ...)" from UCX, "received signal 11" and the like); 0 when none.
int SignalReportedInOutput(std::string_view text);

// Runs the job to completion (bounded by the options). Errors only for launcher problems (cannot
// fork, cannot start the store); rank failures are reported in the result.
Result<LaunchResult> RunLocalRanks(const LaunchOptions& options);

}  // namespace commkit::run
