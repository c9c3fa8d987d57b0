// commkit-run: start N ranks of a program on this node (and join a multi-node job), like torchrun.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "commkit/common/config.h"
#include "commkit/common/env.h"
#include "commkit/common/strings.h"
#include "launcher.h"

namespace {

// Under srun or mpirun the ranks already exist: run the program in place.
bool Deferred(const std::vector<std::string>& command) {
  const char* launcher = nullptr;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) launcher = "mpirun";
  else if (std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID")) launcher = "srun";
  if (launcher == nullptr) return false;
  if (std::getenv("COMMKIT_LOG") && std::string(std::getenv("COMMKIT_LOG")) != "error")
    std::fprintf(stderr, "commkit-run: running under %s: executing the program directly\n", launcher);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::perror("commkit-run: exec");
  std::exit(127);
}

}  // namespace

int main(int argc, char** argv) {
  commkit::run::LaunchOptions o;
  double grace_s = 5, timeout_s = 0, kill_after_s = 5, store_timeout_s = 300, exit_barrier_s = 300;
  bool no_prefix = false, no_store = false, always_spawn = false, keep_handlers = false;
  CLI::App app{
      "commkit-run: start N local ranks of a program with the standard launch variables (RANK, WORLD_SIZE,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT, COMMKIT_STORE_TOKEN) and a hosted\n"
      "rendezvous store. Output lines are prefixed with the rank. When a rank fails, the others are stopped\n"
      "after a grace period and commkit-run exits with the first failing rank's code (128+N for signal N).\n"
      "Across nodes the launchers share failures through node 0's store: a failure on any node stops every\n"
      "node's ranks, and every launcher exits non-zero naming the node and rank that failed first. Ranks die\n"
      "with their launcher (even on SIGKILL). The store uses --master-port, or the next free of the 7 ports\n"
      "after it when another server (torchrun's store) holds it; docs/launchers.md has the rules.\n"
      "Under srun (SLURM_STEP_ID and SLURM_PROCID set) or mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set) it\n"
      "execs the program directly instead: those launchers already started one process per rank, and\n"
      "commkit's launch detection reads their variables (use --always-spawn to override).\n\n"
      "Examples:\n"
      "  commkit-run -n 4 -- ./train --epochs 1\n"
      "  commkit-run --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 -n 8 -- ./train   (on node0)\n"
      "  commkit-run --nnodes 2 --node-rank 1 --master-addr node0 --master-port 29500 -n 8 -- ./train   (on node1)\n\n"
      "Exit codes: 0 all ranks succeeded; the first failing rank's code (128+N for signal N); 124 job timeout;\n"
      "128+N when commkit-run received signal N and forwarded it (130 for Ctrl-C); 127 program not found;\n"
      "2 usage errors; 1 launcher errors.",
      "commkit-run"};
  app.add_option("-n,--nproc-per-node", o.nproc_per_node, "Ranks to start on this node")->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", o.nnodes, "Nodes in the job")->check(CLI::Range(1, 1 << 20));
  app.add_option("--node-rank", o.node_rank, "This node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", o.master_addr, "Address of node 0 (rank 0 and the store)");
  app.add_option("--master-port", o.master_port, "Store port on node 0 (single node: a free port by default)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--grace", grace_s, "Seconds to wait after the first failure before stopping the others (default 5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-after", kill_after_s, "Seconds between SIGTERM and SIGKILL (default 5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", timeout_s, "Stop the whole job after this many seconds (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-prefix", no_prefix, "Do not prefix output lines with the rank");
  app.add_flag("--always-spawn", always_spawn,
               "Spawn the ranks even under srun/mpirun (e.g. one srun task per node, -n ranks per GPU);\n"
               "then pass --nnodes/--node-rank/--master-addr/--master-port yourself");
  app.add_flag("--no-store", no_store, "Do not host the store (rank 0 hosts it instead; failures are then not\n"
                                       "shared between nodes)");
  app.add_option("--store-timeout", store_timeout_s,
                 "Other nodes: seconds to look for node 0's store before giving up (default 300)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--exit-barrier-timeout", exit_barrier_s,
                 "Node 0: seconds to keep the store up for nodes still running after its ranks are done (default 300)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--keep-library-signal-handlers", keep_handlers,
               "Do not set IPATH_NO_BACKTRACE, HFI_NO_BACKTRACE, UCX_HANDLE_ERRORS, UCX_ERROR_SIGNALS,\n"
               "UCX_DEBUG_SIGNO for the ranks (by default they keep those libraries from catching a rank's crash)");
  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));
  // Everything from the program name on belongs to the program: `commkit-run -n 2 prog --its-flag`.
  app.prefix_command();
  app.footer("Usage: commkit-run [options] [--] program [program arguments]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty()) {
    std::fprintf(stderr, "commkit-run: no program given\n%s", app.help().c_str());
    return 2;
  }
  if (!always_spawn && Deferred(o.command)) return 0;
  o.grace = std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  o.kill_after = std::chrono::milliseconds(static_cast<long long>(kill_after_s * 1000));
  o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  o.prefix = !no_prefix;
  o.store_timeout = std::chrono::milliseconds(static_cast<long long>(store_timeout_s * 1000));
  o.exit_barrier = std::chrono::milliseconds(static_cast<long long>(exit_barrier_s * 1000));
  o.keep_library_signal_handlers = keep_handlers;
  o.host_store = !no_store;
  auto result = commkit::run::RunLocalRanks(o);
  if (!result.ok()) {
    std::fprintf(stderr, "commkit-run: %s\n", result.status().ToString().c_str());
    if (result.status().code() == commkit::StatusCode::kNotFound) return 127;  // like a shell
    return result.status().code() == commkit::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (result->exit_code != 0 || isatty(STDERR_FILENO)) std::fprintf(stderr, "%s\n", result->summary.c_str());
  return result->exit_code;
}
