// Internal pieces of the selection table (tuning.h): each source's rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/tuning.h"

namespace commkit::tune {

// Built-in rules: each backend's long-standing behaviour (source kDefault).
std::vector<Rule> DefaultRules(std::string_view backend, const GroupShape& shape);

// Across nodes: the cost model over the given network link (source kTopology).
std::vector<Rule> TopologyRules(std::string_view backend, const GroupShape& shape, double network_Bps,
                                double network_alpha_s, const std::string& derivation);

// The uncalibrated cost model's time for `algorithm` (its closest model formula); < 0 when none.
double ModelSeconds(std::string_view backend, const GroupShape& shape, CollectiveAlgorithm algorithm, double bytes,
                    double network_Bps, double network_alpha_s);

// Calibration-derived rules: per power-of-two bucket the algorithm with the least predicted time,
// where the calibration has fits for at least two of the backend's algorithms (source kCalibration).
std::vector<Rule> CalibrationRules(std::string_view backend, const GroupShape& shape, const Calibration& calibration);

// The deprecated per-backend variables as rules (source kEnv), each with a one-time note on stderr.
Result<std::vector<Rule>> LegacyEnvRules(std::string_view backend);

// The COMMKIT_TUNE text in effect: SetProcessSpec's, else the environment's (nullopt: none).
std::optional<std::string> CurrentSpec();

// This host's network link for the cost model, from the probed topology (ClusterShapeFromTopology),
// probed once per process. beta in bytes/s, alpha in seconds, and where they came from.
struct NetworkLink {
  double beta_Bps = 0;
  double alpha_s = 0;
  std::string derivation;
};
NetworkLink ProbedNetworkLink();

}  // namespace commkit::tune
