// Predicted bus bandwidth from the topology cost model (topology/cost_model.h), next to what was
// measured: an alpha-beta model of this host (memcpy bandwidth for shared-memory backends, TCP
// loopback for Gloo, measured once and briefly) for the ring and recursive-doubling all-reduce; the
// prediction is the faster of the two. All-reduce only; other collectives get none.
#pragma once

#include <string>
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

// Fills pred_busbw_gbps / pred_algorithm of every all-reduce row (Gloo rows use the TCP loopback
// link, every other backend shared memory).
void AddPredictions(const PredictionModel& model, std::vector<ResultRow>& rows);

}  // namespace commkit::bench
