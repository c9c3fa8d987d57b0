// `gpudoctor --bench`: a short local all-reduce on each available CPU backend (ranks as threads over
// an in-process HashStore), with bus bandwidth next to the topology cost model's prediction for this
// host, both computed as commkit-bench computes them (bench/collective.h ComputeBandwidth,
// bench/predict.h PredictAllreduce: HostProfile -> HostShape -> CostModel::Best). A smoke test of the comm
// stack and a sanity check of the model, not a benchmark: use commkit-bench for real sweeps.
//
// Blocking; bounded: every operation times out after `op_timeout`, a size is started only while the
// `budget` is not spent (the ranks agree on it with a one-int all-reduce), and the host calibration is
// bounded to about a second. Not reentrant with itself on the same store (it makes its own).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::diagnostics {

struct LocalBenchOptions {
  std::vector<std::string> backends = {"host", "gloo"};  // in order; an unavailable one is noted, not fatal
  std::vector<std::size_t> sizes = {1 << 10, 64 << 10, 1 << 20, 16 << 20};  // bytes of float32 per rank
  int ranks = 2;
  std::chrono::milliseconds budget = std::chrono::seconds(4);        // per backend, for the timed sizes
  std::chrono::milliseconds op_timeout = std::chrono::seconds(20);   // per collective
  bool calibrate = true;  // measure memcpy / TCP loopback for the model (else its documented defaults)
};

struct LocalBenchRow {
  std::string backend;
  std::size_t bytes = 0;
  int iters = 0;
  double time_us = 0;            // mean per all-reduce, the slowest rank
  double busbw_gbps = 0;         // algbw * 2(n-1)/n
  double pred_busbw_gbps = 0;    // the cost model's best algorithm; 0 when the model has none
  std::string pred_algorithm;    // "ring", "recursive_doubling", ...
  bool correct = false;          // every output element equals the expected sum
};

struct LocalBenchReport {
  int ranks = 0;
  std::vector<LocalBenchRow> rows;
  std::vector<std::string> notes;  // unavailable backends, sizes cut by the budget
  std::string model;               // what the prediction assumed
  bool AllCorrect() const;
  std::string ToText() const;
  std::string ToJson() const;      // {"ranks":..,"model":..,"notes":[..],"rows":[{..}]}
};

// Fails only on bad options (no backend, no size, ranks < 2, a size not a multiple of 4 bytes).
Result<LocalBenchReport> RunLocalBench(const LocalBenchOptions& options = {});

}  // namespace commkit::diagnostics
