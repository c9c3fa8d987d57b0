// The selection table: built once per group from the four sources, asked once per call.
#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <cmath>
#include <thread>

#include "commkit/common/cpu_cache.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "defaults.h"

namespace commkit::tune {

namespace {

bool ShapeMatches(const Rule& r, const GroupShape& s) {
  return r.ranks.Contains(s.ranks) && r.nodes.Contains(s.nodes) && r.ranks_per_node.Contains(s.ranks_per_node);
}

bool Has(const std::vector<CollectiveAlgorithm>& v, CollectiveAlgorithm a) {
  return std::find(v.begin(), v.end(), a) != v.end();
}

std::string AlgorithmNames(const std::vector<CollectiveAlgorithm>& v) {
  std::vector<std::string> out;
  for (CollectiveAlgorithm a : v) out.emplace_back(ToString(a));
  return out.empty() ? std::string("none: not tunable") : Join(out, ", ");
}

// Every algorithm `backend` has for `collective` in any group shape.
std::vector<CollectiveAlgorithm> AnyShape(std::string_view backend, CollectiveKind collective) {
  std::vector<CollectiveAlgorithm> out = Algorithms(backend, collective, GroupShape{2, 2, 1});
  for (CollectiveAlgorithm a : Algorithms(backend, collective, GroupShape{4, 2, 2}))
    if (!Has(out, a)) out.push_back(a);
  return out;
}

// The network link agreed by the group: rank 0's numbers, published in the store.
Result<NetworkLink> AgreedNetwork(const TableOptions& o) {
  NetworkLink link;
  if (o.network_Bps) {
    link.beta_Bps = *o.network_Bps;
    link.alpha_s = o.network_alpha_s.value_or(25e-6);
    link.derivation = o.network_derivation.empty() ? std::string("given by the caller") : o.network_derivation;
  } else if (o.store == nullptr || o.rank == 0) {
    link = ProbedNetworkLink();
  }
  if (o.store == nullptr) return link;
  if (o.rank == 0) {
    COMMKIT_RETURN_IF_ERROR(o.store->Set("tune/network", StrCat(link.beta_Bps, " ", link.alpha_s, " ", link.derivation)));
    return link;
  }
  COMMKIT_ASSIGN_OR_RETURN(std::string v, o.store->Get("tune/network", o.timeout));
  std::vector<std::string> parts = Split(v, ' ');
  if (parts.size() < 2) return Status::Internal(StrCat("selection table: rank 0 published a malformed network link '", v, "'"));
  link.beta_Bps = ParseDouble(parts[0]).value_or(0);
  link.alpha_s = ParseDouble(parts[1]).value_or(0);
  const auto second = v.find(' ', v.find(' ') + 1);
  link.derivation = StrCat("rank 0's ", second == std::string::npos ? std::string() : v.substr(second + 1));
  return link;
}

Result<std::vector<Rule>> AgreedCalibration(const TableOptions& o, std::vector<Rule> mine) {
  if (o.rank == 0) {
    std::vector<std::string> items;
    for (const Rule& r : mine) items.push_back(FormatRule(r));
    COMMKIT_RETURN_IF_ERROR(o.store->Set("tune/calibration", StrCat("v1;", Join(items, ","))));
    return mine;
  }
  COMMKIT_ASSIGN_OR_RETURN(std::string v, o.store->Get("tune/calibration", o.timeout));
  if (!StartsWith(v, "v1;"))
    return Status::Internal(StrCat("selection table: rank 0 published calibration rules of another format ('",
                                   v.substr(0, 40), "'); run the same commkit on every rank"));
  COMMKIT_ASSIGN_OR_RETURN(std::vector<Rule> rules, ParseSpec(std::string_view(v).substr(3), "rank 0's calibration rules"));
  for (Rule& r : rules) {
    r.source = Source::kCalibration;
    r.why = "calibration (rank 0's cache)";
  }
  return rules;
}

// Run counters: host, gloo, mpi, any other backend.
std::array<std::array<std::atomic<std::uint64_t>, kNumCollectiveAlgorithms>, 4>& Counters() {
  static std::array<std::array<std::atomic<std::uint64_t>, kNumCollectiveAlgorithms>, 4> counters{};
  return counters;
}
std::size_t BackendIndex(std::string_view backend) {
  return backend == "host" ? 0 : backend == "gloo" ? 1 : backend == "mpi" ? 2 : 3;
}

}  // namespace

std::vector<Rule> CalibrationRules(std::string_view backend, const GroupShape& shape, const Calibration& calibration) {
  std::vector<Rule> out;
  // One calibration file is one host's: only groups within one node plan from it (every rank reads
  // the same file, so every rank chooses alike).
  if (shape.nodes != 1) return out;
  for (CollectiveKind c : {CollectiveKind::kAllreduce, CollectiveKind::kReduce, CollectiveKind::kAllgather,
                           CollectiveKind::kBroadcast}) {
    std::vector<CollectiveAlgorithm> fitted;
    for (CollectiveAlgorithm a : Algorithms(backend, c, shape))
      if (calibration.Find(backend, c, a, shape.ranks, 0) != nullptr) fitted.push_back(a);
    if (fitted.size() < 2) continue;
    std::size_t lo = 0;
    for (int k = 0; k <= 30; ++k) {
      const double bytes = std::ldexp(1.0, k);
      CollectiveAlgorithm best = fitted[0];
      double best_s = -1;
      for (CollectiveAlgorithm a : fitted) {
        if (bytes > static_cast<double>(AlgorithmMaxBytes(backend, a, shape))) continue;
        const double s = PredictSeconds(*calibration.Find(backend, c, a, shape.ranks, static_cast<std::size_t>(bytes)), bytes);
        if (best_s < 0 || s < best_s) {
          best_s = s;
          best = a;
        }
      }
      const std::size_t hi = k == 30 ? kNoLimit : static_cast<std::size_t>(bytes) + 1;
      if (!out.empty() && out.back().collective == c && out.back().algorithm == best) {
        out.back().max_bytes = hi;
        continue;
      }
      Rule r;
      r.backend = std::string(backend);
      r.collective = c;
      r.min_bytes = lo;
      r.max_bytes = hi;
      r.algorithm = best;
      r.source = Source::kCalibration;
      r.predicted_s = best_s;
      r.why = StrCat("calibration (", calibration.created, "): the fastest of ", AlgorithmNames(fitted), " at ",
                     shape.ranks, " ranks");
      if (backend == "mpi" && best == CollectiveAlgorithm::kRing) r.params.segment_bytes = std::size_t{256} << 10;
      out.push_back(std::move(r));
      lo = hi;
    }
    // Later ranges start where the previous one ended.
    for (std::size_t i = 1; i < out.size(); ++i)
      if (out[i].collective == out[i - 1].collective) out[i].min_bytes = out[i - 1].max_bytes;
  }
  return out;
}

GroupShape LocalGroupShape(int ranks, int ranks_per_node, int nodes) {
  return {ranks, ranks_per_node, nodes, static_cast<int>(std::thread::hardware_concurrency()), ThisCpuVendor()};
}

Result<Table> Table::ForBackend(std::string_view backend, const BackendContext& ctx, const GroupShape& shape) {
  TableOptions options;
  options.store = ctx.store;
  options.rank = ctx.rank;
  options.timeout = ctx.timeout;
  return ForGroup(backend, shape, options);
}

Result<Table> Table::ForGroup(std::string_view backend, const GroupShape& shape, const TableOptions& options) {
  Table t;
  t.backend_ = std::string(backend);
  t.shape_ = shape;
  const std::string who = StrCat(backend, " backend selection table (", shape.ranks, " ranks, ", shape.nodes, " node",
                                 shape.nodes == 1 ? "" : "s", ")");

  // env first, so that a malformed value fails before anything is probed or read.
  std::vector<Rule> env;
  if (options.legacy_env) {
    auto legacy = LegacyEnvRules(backend);
    if (!legacy.ok()) return legacy.status().WithContext(who);
    env = std::move(*legacy);
  }
  std::optional<std::string> spec = options.spec ? options.spec : CurrentSpec();
  if (spec) {
    auto parsed = ParseSpec(*spec, options.spec ? "tuning spec" : "COMMKIT_TUNE");
    if (!parsed.ok()) return parsed.status().WithContext(who);
    for (Rule& r : *parsed) {
      if (!r.backend.empty() && r.backend != backend) continue;
      const std::vector<CollectiveAlgorithm> any = AnyShape(backend, r.collective);
      if (!Has(any, r.algorithm)) {
        if (r.backend.empty()) continue;  // a generic item for the backends that have it
        return Status::InvalidArgument(StrCat(who, ": ", r.why, ": the ", backend, " backend has no ", ToString(r.algorithm),
                                              " for ", ToString(r.collective), " (it has: ", AlgorithmNames(any),
                                              "); change the algorithm or the backend prefix"));
      }
      env.push_back(std::move(r));
    }
  }

  std::vector<Rule> all = DefaultRules(backend, shape);
  if (shape.nodes > 1 && backend == "host") {
    auto link = AgreedNetwork(options);
    if (!link.ok()) return link.status().WithContext(StrCat(who, ": agreeing on the network link"));
    t.network_Bps_ = link->beta_Bps;
    t.network_alpha_s_ = link->alpha_s;
    for (Rule& r : TopologyRules(backend, shape, link->beta_Bps, link->alpha_s, link->derivation)) all.push_back(std::move(r));
  }
  if (options.calibration) {
    t.calibration_ = options.calibration;
  } else if (options.read_cache) {
    auto loaded = LoadCalibration(CalibrationPath());
    if (!loaded.ok()) {
      t.notes_.push_back(StrCat("calibration cache ignored: ", loaded.status().message()));
      static std::once_flag warned;
      std::call_once(warned, [&] { COMMKIT_LOG_WARN(t.notes_.back()); });
    } else {
      t.calibration_ = std::move(*loaded);
    }
  }
  std::vector<Rule> calibrated;
  if (t.calibration_) calibrated = CalibrationRules(backend, shape, *t.calibration_);
  if (options.store != nullptr) {
    // Every rank must choose alike: the others take rank 0's calibration rules.
    auto agreed = AgreedCalibration(options, calibrated);
    if (!agreed.ok()) return agreed.status().WithContext(StrCat(who, ": agreeing on the calibration"));
    calibrated = std::move(*agreed);
  }
  for (Rule& r : calibrated) all.push_back(std::move(r));
  for (Rule& r : env) all.push_back(std::move(r));

  for (Rule& r : all) {
    if (!ShapeMatches(r, shape)) continue;
    if (!Has(Algorithms(backend, r.collective, shape), r.algorithm)) {
      t.notes_.push_back(StrCat(r.why, ": ", ToString(r.algorithm), " does not apply to ", ToString(r.collective), " in a group of ",
                                shape.ranks, " ranks on ", shape.nodes, " node(s) (here: ",
                                AlgorithmNames(Algorithms(backend, r.collective, shape)), "); ignored"));
      continue;
    }
    r.backend = std::string(backend);
    t.rules_.push_back(std::move(r));
  }
  t.BuildIndex();
  return t;
}

void Table::BuildIndex() {
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const std::vector<CollectiveAlgorithm> algorithms = Algorithms(backend_, static_cast<CollectiveKind>(k), shape_);
    only_[k] = algorithms.empty() ? CollectiveAlgorithm::kRing : algorithms.front();
    for (MemoryKind memory : {MemoryKind::kHost, MemoryKind::kDevice}) {
      const auto collective = static_cast<CollectiveKind>(k);
      auto applies = [&](const Rule& r) { return r.collective == collective && (!r.memory || *r.memory == memory); };
      // The winner can change only where some applicable rule starts or ends.
      std::vector<std::size_t> cuts = {0};
      for (const Rule& r : rules_)
        if (applies(r)) {
          cuts.push_back(r.min_bytes);
          if (r.max_bytes != kNoLimit) cuts.push_back(r.max_bytes);
        }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      std::vector<Interval>& index = index_[2 * k + static_cast<int>(memory)];
      for (std::size_t at : cuts) {
        int winner = -1;
        for (int i = static_cast<int>(rules_.size()) - 1; i >= 0 && winner < 0; --i)
          if (applies(rules_[i]) && at >= rules_[i].min_bytes && at < rules_[i].max_bytes) winner = i;
        if (index.empty() || index.back().rule != winner) index.push_back({at, winner});
      }
    }
  }
}

Choice Table::Select(CollectiveKind collective, MemoryKind memory, std::size_t bytes) const {
  const std::vector<Interval>& index = index_[2 * static_cast<int>(collective) + static_cast<int>(memory)];
  auto after = std::upper_bound(index.begin(), index.end(), bytes,
                                [](std::size_t b, const Interval& i) { return b < i.start; });
  const int winner = after == index.begin() ? -1 : std::prev(after)->rule;
  if (winner >= 0) {
    const auto it = rules_.rbegin() + (static_cast<std::ptrdiff_t>(rules_.size()) - 1 - winner);
    const Rule& r = *it;
    Choice c{r.algorithm, r.params, r.source, r.why};
    if (c.algorithm == CollectiveAlgorithm::kHierarchical && !c.params.between) {
      // Forced hierarchical without `between=`: the leaders' algorithm from the rules below.
      for (auto below = std::next(it); below != rules_.rend(); ++below)
        if (below->collective == collective && below->params.between && bytes >= below->min_bytes &&
            bytes < below->max_bytes) {
          c.params.between = below->params.between;
          break;
        }
    }
    return c;
  }
  return Choice{only_[static_cast<int>(collective)], {}, Source::kDefault, "not tunable: the backend's only way"};
}

bool Table::Uses(CollectiveKind collective, CollectiveAlgorithm algorithm) const {
  // Where the choice can change: every rule's first size, and the powers of two between.
  std::vector<std::size_t> sizes = {0};
  for (const Rule& r : rules_)
    if (r.collective == collective) sizes.push_back(r.min_bytes);
  for (int k = 0; k < 63; ++k) sizes.push_back(std::size_t{1} << k);
  for (std::size_t bytes : sizes)
    for (MemoryKind m : {MemoryKind::kHost, MemoryKind::kDevice})
      if (Select(collective, m, bytes).algorithm == algorithm) return true;
  return false;
}

std::pair<double, std::string> Table::Predict(CollectiveKind collective, CollectiveAlgorithm algorithm,
                                              std::size_t bytes) const {
  if (calibration_ && shape_.nodes == 1)
    if (const Fit* f = calibration_->Find(backend_, collective, algorithm, shape_.ranks, bytes))
      return {PredictSeconds(*f, static_cast<double>(bytes)), "calibration"};
  if (collective != CollectiveKind::kAllreduce) return {-1, ""};
  const double s =
      ModelSeconds(backend_, shape_, algorithm, static_cast<double>(bytes), network_Bps_, network_alpha_s_);
  if (s < 0) return {-1, ""};
  return {s, shape_.nodes > 1 ? "cost model (probed network)" : "cost model (uncalibrated defaults)"};
}

void NoteRun(std::string_view backend, CollectiveAlgorithm algorithm) {
  const auto a = static_cast<std::size_t>(algorithm);
  if (a < kNumCollectiveAlgorithms) Counters()[BackendIndex(backend)][a].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t RunCount(std::string_view backend, CollectiveAlgorithm algorithm) {
  const auto a = static_cast<std::size_t>(algorithm);
  return a < kNumCollectiveAlgorithms ? Counters()[BackendIndex(backend)][a].load(std::memory_order_relaxed) : 0;
}

}  // namespace commkit::tune
