// Helpers of the selection-table tests (tune_test.cc, tune_calibration_test.cc): tables built from
// nothing but what a test gives them, and calibrated lines.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "commkit/comm/tuning.h"
#include "test_support.h"

namespace commkit::testing {

using tune::Source;

inline constexpr auto kAll = CollectiveKind::kAllreduce;
inline constexpr auto kHostMem = MemoryKind::kHost;

inline tune::TableOptions Isolated(std::optional<std::string> spec = std::nullopt) {
  tune::TableOptions o;
  o.spec = spec.value_or("");
  o.legacy_env = false;
  o.read_cache = false;
  return o;
}

inline tune::Table MustTable(std::string_view backend, tune::GroupShape shape, const tune::TableOptions& o) {
  auto t = tune::Table::ForGroup(backend, shape, o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : tune::Table();
}

// One calibrated line, t(n) = alpha + n / beta, over every size.
inline tune::Fit CalibratedLine(std::string_view backend, CollectiveKind collective, CollectiveAlgorithm algorithm,
                                int ranks, double alpha_s, double beta_Bps) {
  tune::Fit f;
  f.backend = std::string(backend);
  f.collective = collective;
  f.algorithm = algorithm;
  f.ranks = ranks;
  f.alpha_s = alpha_s;
  f.beta_Bps = beta_Bps;
  f.samples = 5;
  return f;
}

inline tune::Calibration SyntheticCalibration(std::string_view backend, int ranks) {
  // recursive doubling cheap per call, ring cheap per byte: the crossover is at 64 KiB.
  tune::Calibration c;
  c.created = "test";
  c.fits.push_back(CalibratedLine(backend, kAll, CollectiveAlgorithm::kRecursiveDoubling, ranks, 10e-6, 1e9));
  c.fits.push_back(CalibratedLine(backend, kAll, CollectiveAlgorithm::kRing, ranks, 10e-6 + 65536 / 1e9, 1e12));
  return c;
}

}  // namespace commkit::testing
