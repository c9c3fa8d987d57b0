#include "commkit/bench/predict.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "commkit/bench/collective.h"
#include "commkit/comm/registry.h"
#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"

namespace commkit::bench {

namespace {

// The time of a row as compared with predictions: out of place when measured, else in place.
const Measurement* Measured(const ResultRow& row) {
  if (row.out_of_place.valid) return &row.out_of_place;
  if (row.in_place.valid) return &row.in_place;
  return nullptr;
}

std::string NowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

PredictionModel MakePredictionModel(bool measure) {
  topology::HostProfileOptions options;
  options.measure = measure;
  options.memcpy_bytes = 16 << 20;
  options.stream_bytes = 16 << 20;
  options.pingpongs = 100;
  options.time_limit_s = 1;
  topology::HostProfile p = topology::ProbeHostProfile(options);
  PredictionModel m;
  m.memcpy_Bps = p.memcpy_Bps;
  m.loopback_alpha_s = p.loopback_alpha_s;
  m.loopback_beta_Bps = p.loopback_beta_Bps;
  const std::filesystem::path cache = tune::CalibrationPath();
  m.description = StrCat("rows marked (calibration): the selection table's algorithm with the calibration cache ",
                         cache.empty()                        ? std::string("(off)")
                         : std::filesystem::exists(cache)     ? cache.string()
                                                              : StrCat(cache.string(), " (none yet: run --calibrate)"),
                         "; other rows: topology cost model (ring / recursive doubling, the faster): shared memory 1 us "
                         "and ", p.memcpy_Bps / 2e9, " GB/s (memcpy/2), TCP loopback ", p.loopback_alpha_s * 1e6,
                         " us and ", p.loopback_beta_Bps / 1e9, " GB/s for gloo; ", Join(p.notes, "; "));
  return m;
}

std::optional<AllreducePrediction> PredictAllreduce(const PredictionModel& model, std::string_view backend, int nranks,
                                                    std::size_t bytes) {
  if (nranks < 1) return std::nullopt;
  topology::HostProfile profile;
  profile.memcpy_Bps = model.memcpy_Bps;
  profile.loopback_alpha_s = model.loopback_alpha_s;
  profile.loopback_beta_Bps = model.loopback_beta_Bps;
  const bool tcp = backend == "gloo" || backend == "raw-gloo";
  auto cost = topology::CostModel::Create(topology::HostShape(profile, nranks, tcp));
  if (!cost.ok()) return std::nullopt;
  const topology::Prediction p = cost->Best(static_cast<double>(bytes));
  return AllreducePrediction{p.busbw_Bps / 1e9, std::string(ToString(p.algorithm))};
}

void AddPredictions(const PredictionModel& model, std::vector<ResultRow>& rows) {
  std::map<std::pair<std::string, int>, std::optional<tune::Table>> tables;
  for (ResultRow& row : rows) {
    if (row.collective != BenchCollective::kAllreduce || row.nranks < 1) continue;
    const double busfactor = row.nranks > 1 ? 2.0 * (row.nranks - 1) / row.nranks : 0;
    // The table's choice and its calibrated time, as the backend saw them (same environment).
    auto key = std::make_pair(row.backend, row.nranks);
    if (!tables.contains(key)) {
      tune::TableOptions o;
      auto t = tune::Table::ForGroup(row.backend, tune::LocalGroupShape(row.nranks, row.nranks, 1), o);
      tables[key] = t.ok() ? std::optional<tune::Table>(std::move(*t)) : std::nullopt;
    }
    std::string_view modelled = row.backend;
    if (const auto& table = tables[key]) {
      const tune::Choice c = table->Select(CollectiveKind::kAllreduce, MemoryKind::kHost, row.bytes);
      // gloo's flat moves through the shared-memory meeting, not over TCP.
      if (row.backend == "gloo" && c.algorithm == CollectiveAlgorithm::kFlat) modelled = "host";
      const auto [s, by] = table->Predict(CollectiveKind::kAllreduce, c.algorithm, row.bytes);
      if (by == "calibration" && s > 0) {
        row.pred_busbw_gbps = static_cast<double>(row.bytes) / s * busfactor / 1e9;
        row.pred_algorithm = StrCat(ToString(c.algorithm), " (calibration)");
        continue;
      }
    }
    if (auto p = PredictAllreduce(model, modelled, row.nranks, row.bytes)) {
      row.pred_busbw_gbps = p->busbw_gbps;
      row.pred_algorithm = p->algorithm;
    }
  }
}

std::string AutoBackendName() {
  for (const BackendInfo& info : Registry::Default().List())
    if (info.available && info.memory == MemoryKind::kHost) return info.name;
  return "host";
}

Result<std::string> PlanOutput(const BenchOptions& options, int nranks) {
  const CollectiveKind kind = Describe(options.collective).kind;
  std::vector<tune::PlanRow> all;
  std::vector<std::string> notes;
  for (const std::string& requested : options.backends) {
    const std::string backend = requested == "auto" ? AutoBackendName() : requested;
    tune::TableOptions o;
    auto table = tune::Table::ForGroup(backend, tune::LocalGroupShape(nranks, nranks, 1), o);
    if (!table.ok()) return table.status().WithContext("commkit-bench --plan");
    for (const std::string& n : table->notes()) notes.push_back(StrCat(backend, ": ", n));
    std::vector<tune::PlanRow> rows =
        tune::Plan(*table, kind, MemoryKind::kHost, options.min_bytes, options.max_bytes);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  if (options.format == OutputFormat::kJson) return tune::PlanJson(all) + "\n";
  std::string out = StrCat("# commkit-bench --plan: ", ToString(options.collective), ", ", nranks,
                           " ranks on one node; source: default < topology < calibration < env (docs/tuning.md)\n");
  out += tune::PlanText(all);
  for (const std::string& n : notes) out += StrCat("# note: ", n, "\n");
  return out;
}

std::string AddCalibrationFits(const std::string& backend, CollectiveKind collective, CollectiveAlgorithm algorithm,
                               int nranks, const std::vector<ResultRow>& rows, tune::Calibration& into) {
  std::map<std::size_t, std::vector<double>> by_size;
  // Beyond its limit the backend runs another algorithm: those sizes would be fitted to the wrong name.
  const std::size_t limit = tune::AlgorithmMaxBytes(backend, algorithm, {nranks, nranks, 1});
  for (const ResultRow& r : rows) {
    if (r.bytes > limit) continue;
    const Measurement* m = Measured(r);
    if (m != nullptr && m->time_us > 0) by_size[r.bytes].push_back(m->time_us * 1e-6);
  }
  std::vector<std::pair<double, double>> samples;
  for (auto& [bytes, times] : by_size) {
    std::sort(times.begin(), times.end());
    const std::size_t k = times.size();
    const double median = k % 2 == 1 ? times[k / 2] : (times[k / 2 - 1] + times[k / 2]) / 2;
    samples.emplace_back(static_cast<double>(bytes), median);
  }
  tune::Fit key;
  key.backend = backend;
  key.collective = collective;
  key.algorithm = algorithm;
  key.ranks = nranks;
  std::string out;
  for (const tune::Fit& f : tune::FitPieces(key, samples)) {
    double worst = 1;
    for (const auto& [n, t] : samples) {
      if (n < static_cast<double>(f.min_bytes) || n >= static_cast<double>(f.max_bytes)) continue;
      const double p = tune::PredictSeconds(f, n);
      worst = std::max(worst, std::max(p / t, t / p));
    }
    out += StrCat("# ", backend, " ", ToString(collective), " ", ToString(algorithm), " ", nranks, " ranks ",
                  HumanBytes(static_cast<double>(f.min_bytes)), "..",
                  f.max_bytes == tune::kNoLimit ? std::string("") : HumanBytes(static_cast<double>(f.max_bytes)),
                  ": alpha ", HumanSeconds(f.alpha_s), ", beta ", f.beta_Bps / 1e9, " GB/s, ", f.samples,
                  " sizes, worst fit ", worst, "x\n");
    into.fits.push_back(f);
  }
  return out;
}

Result<std::string> SaveCalibrationMerged(const tune::Calibration& fits) {
  const std::filesystem::path path = tune::CalibrationPath();
  if (path.empty())
    return Status::InvalidArgument("commkit-bench --calibrate: no cache file (COMMKIT_TUNE_CACHE=off, or neither "
                                   "XDG_CACHE_HOME nor HOME is set); set COMMKIT_TUNE_CACHE to a file");
  tune::Calibration merged;
  if (auto old = tune::LoadCalibration(path); old.ok() && old->has_value()) merged = std::move(**old);
  auto replaced = [&](const tune::Fit& f) {
    return std::any_of(fits.fits.begin(), fits.fits.end(), [&](const tune::Fit& n) {
      return n.backend == f.backend && n.collective == f.collective && n.algorithm == f.algorithm && n.ranks == f.ranks;
    });
  };
  std::erase_if(merged.fits, replaced);
  merged.fits.insert(merged.fits.end(), fits.fits.begin(), fits.fits.end());
  merged.hostname = tune::CalibrationHostname();
  merged.version = COMMKIT_VERSION_STRING;
  merged.created = NowUtc();
  COMMKIT_RETURN_IF_ERROR(tune::SaveCalibration(path, merged));
  return path.string();
}

}  // namespace commkit::bench
