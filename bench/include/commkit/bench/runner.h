// Runs a size sweep of one collective on a process group (every rank calls RunSweep with the same
// options; collective in the SPMD sense). Blocking; every operation is bounded by options.timeout_s.
//
// Per size and placement: fill deterministic per-rank patterns, `warmup` untimed calls, then `iters`
// timed calls, time = elapsed / iters, combined over ranks as -a says (max by default; an allreduce on
// the control group); then, with checking on, the inputs are refilled, one more call is made and every
// element of the output is compared with the value computed locally from the patterns; the wrong
// counts are summed over ranks. The rows are identical on every rank.
//
// Host backends: every call is waited; time is the host clock. Device backends (SweepOptions::device
// set): the buffers are cudaMalloc'ed on the rank's GPU, the calls are enqueued on its stream (waited
// only with -z), time is CUDA events on that stream around the timed calls (or around -G graph
// launches of the captured calls), and results are copied back to the host and checked there.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commkit/bench/options.h"
#include "commkit/bench/report.h"
#include "commkit/comm/process_group.h"

namespace commkit::bench {

// Deterministic pattern value of element `i` of rank `rank`'s input (small integers, exact in every
// type, also after summing or multiplying over up to 256 ranks within f32 range). `salt` varies per
// size so stale results from a previous size are detected.
double PatternValue(int rank, std::size_t i, unsigned salt);
// The input actually written: PatternValue, folded to {1, 2} for products (exact powers of two).
double InputValue(const BenchOptions& options, int rank, std::size_t i, unsigned salt);

// Expected value of element `i` of `rank`'s output for the collective. Used by the verifier.
double ExpectedValue(const BenchOptions& options, const BufferCounts& counts, int rank, int nranks, std::size_t i,
                     unsigned salt);

// Called after each size (for the progress bar): (index of the size, number of sizes).
using ProgressFn = std::function<void(std::size_t done, std::size_t total)>;

// An alternative implementation of one collective call (the --raw baselines): given the send/recv
// buffers and counts, runs one operation to completion. `label` names it in the results.
struct RawCollective {
  std::string label;  // "raw-mpi"
  // Runs once, blocking. Returns an error for an unsupported combination.
  std::function<Status(const void* send, void* recv, const BufferCounts& counts)> run;
};

class Device;

struct SweepOptions {
  ProgressFn progress;                     // may be empty
  const RawCollective* raw = nullptr;      // time this instead of the process group (the group is still
                                           // used for barriers, the time maximum and wrong counts)
  Device* device = nullptr;                // device buffers on this GPU (device backends), else host
  // Barriers, the time over ranks and the wrong counts run here (a host-memory group over the same
  // ranks); nullptr: on the measured group itself (host backends).
  ProcessGroup* control = nullptr;
};

Result<std::vector<ResultRow>> RunSweep(ProcessGroup& group, const BenchOptions& options,
                                        const SweepOptions& sweep = {});

}  // namespace commkit::bench
