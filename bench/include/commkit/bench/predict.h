// Predicted times next to what was measured, the selection-table plan (--plan) and the calibration
// (--calibrate) of commkit-bench (docs/tuning.md).
//
// An all-reduce row's prediction comes from the selection table (commkit/comm/tuning.h) when the
// calibration cache has a fit for that backend, algorithm and rank count ("(calibration)" after the
// algorithm); otherwise from the topology cost model of this host: memcpy bandwidth for shared-memory
// backends, TCP loopback for Gloo (measured once and briefly, or the documented defaults), ring or
// recursive doubling, the faster.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/bench/options.h"
#include "commkit/bench/report.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/status.h"

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

// Fills pred_busbw_gbps / pred_algorithm of every all-reduce row: from the calibration cache where it
// has a fit for the algorithm the table chooses, else from `model` (Gloo rows: TCP loopback; every
// other backend: shared memory).
void AddPredictions(const PredictionModel& model, std::vector<ResultRow>& rows);

// The backend "auto" stands for: the first available host-memory backend of the registry.
std::string AutoBackendName();

// --plan: for every backend of the options, the selection table's choice per size bucket of the sweep
// (text, or one JSON array with --format json). InvalidArgument for a malformed COMMKIT_TUNE.
Result<std::string> PlanOutput(const BenchOptions& options, int nranks);

// --calibrate: adds piecewise fits of `rows` (one forced algorithm's sweeps of `collective`; a size
// measured more than once counts with its median time) to `into`; returns a summary line per fit
// ("# host allreduce flat 2 ranks 0 B..64 KiB: alpha 3.1 us, beta 2.3 GB/s, worst fit 1.12x").
std::string AddCalibrationFits(const std::string& backend, CollectiveKind collective, CollectiveAlgorithm algorithm,
                               int nranks, const std::vector<ResultRow>& rows, tune::Calibration& into);
// Writes `fits` into the cache (keeping the cache's fits for other backends/algorithms/rank counts
// when it is valid); returns the path.
Result<std::string> SaveCalibrationMerged(const tune::Calibration& fits);

}  // namespace commkit::bench
