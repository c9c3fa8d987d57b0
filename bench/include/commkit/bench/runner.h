// Runs a size sweep of one collective on a process group (every rank calls RunSweep with the same
// options; collective in the SPMD sense). Blocking; every operation is bounded by options.timeout_s.
//
// Per size and placement: fill deterministic per-rank patterns, `warmup` untimed calls, then `iters`
// timed calls (each waited), time = elapsed / iters, max over ranks (an allreduce-max on the group
// itself); then, with checking on, the inputs are refilled, one more call is made and every element
// of the output is compared with the value computed locally from the patterns; the wrong counts are
// summed over ranks. The rows are identical on every rank.
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

struct SweepOptions {
  ProgressFn progress;                     // may be empty
  const RawCollective* raw = nullptr;      // time this instead of the process group (the group is still
                                           // used for barriers, the time maximum and wrong counts)
};

Result<std::vector<ResultRow>> RunSweep(ProcessGroup& group, const BenchOptions& options,
                                        const SweepOptions& sweep = {});

}  // namespace commkit::bench
