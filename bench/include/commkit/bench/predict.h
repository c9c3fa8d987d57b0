// Predicted bus bandwidth from the topology cost model (topology/cost_model.h), next to what was
// measured: an alpha-beta model of this host (memcpy bandwidth for shared-memory backends, TCP
// loopback for Gloo, measured once and briefly) for the ring and recursive-doubling all-reduce; the
// prediction is the faster of the two. All-reduce only; other collectives get none.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/bench/report.h"

namespace commkit::bench {

struct PredictionModel {
  std::string description;  // "cost model: shared memory 1 us, 9.1 GB/s (memcpy/2, measured) ..."
  double memcpy_Bps = 0;
  double loopback_alpha_s = 0;
  double loopback_beta_Bps = 0;
};

// Measures this host's memcpy and TCP loopback (bounded to about a second); `measure` false uses the
// cost model's documented defaults.
PredictionModel MakePredictionModel(bool measure);

struct AllreducePrediction {
  double busbw_gbps = 0;  // GB/s (1e9 bytes per second)
  std::string algorithm;  // the faster model algorithm: "ring", "recursive_doubling"
};

// The prediction for one all-reduce of `bytes` per rank over `nranks` ranks of `backend` on this host:
// Gloo (and raw Gloo) on the TCP loopback link, every other backend on shared memory. nullopt when the
// model has none (nranks < 1).
std::optional<AllreducePrediction> PredictAllreduce(const PredictionModel& model, std::string_view backend, int nranks,
                                                    std::size_t bytes);

// Fills pred_busbw_gbps / pred_algorithm of every all-reduce row with PredictAllreduce.
void AddPredictions(const PredictionModel& model, std::vector<ResultRow>& rows);

}  // namespace commkit::bench
