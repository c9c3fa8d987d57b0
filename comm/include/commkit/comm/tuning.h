// One selection table for every backend: for a collective, a memory kind, a message size and a group
// shape, which algorithm runs with which parameters, and why (docs/tuning.md).
//
// A backend builds its table once per group (Table::ForGroup) and asks it once per call
// (Table::Select). The table is filled, in increasing precedence, from
//   default      built-in rules equal to each backend's long-standing behaviour;
//   topology     the probed topology's network (real NIC speed) in the cost model, across nodes;
//   calibration  alpha/beta per backend algorithm measured once on this machine and cached
//                (`commkit-bench --calibrate`; the file is safe to delete);
//   env          COMMKIT_TUNE (the grammar below) and the deprecated per-backend variables
//                (COMMKIT_HOST_ALGORITHM, COMMKIT_HOST_FLAT_BYTES, COMMKIT_GLOO_ALGORITHM), which are
//                read as COMMKIT_TUNE items with a one-time note on stderr.
//
// COMMKIT_TUNE grammar (whitespace around tokens is ignored; names are case-insensitive):
//   spec    := item { ',' item }
//   item    := target ':' range ':' algorithm { ':' param }
//   target  := [ backend '.' ] collective [ '@' memory ]     backend: host | gloo | mpi
//   range   := size '-' [ size ]  |  '*'                     half-open [lo, hi); "64K-" has no end
//   algorithm := a name of commkit/common/collective_algorithm.h (ToString's spelling)
//   size    := digits [ 'K' | 'M' | 'G' ] [ 'i' ] [ 'B' ]    binary multiples: 64K = 65536
//   param   := 'segment=' size | 'between=' algorithm
//            | ( 'ranks' | 'nodes' | 'ppn' ) '=' count [ '-' [ count ] ]   (the item applies only there)
// Items without a backend apply to every backend that has the algorithm for that collective. When
// items overlap, the later one wins for the sizes they share.
#pragma once

#include <chrono>
#include <climits>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/store.h"
#include "commkit/comm/types.h"
#include "commkit/common/collective_algorithm.h"
#include "commkit/common/status.h"

namespace commkit::tune {

// Where a choice came from, in increasing precedence.
enum class Source : std::uint8_t { kDefault, kTopology, kCalibration, kEnv };
std::string_view ToString(Source source);

struct GroupShape {
  int ranks = 1;
  int ranks_per_node = 1;  // the most ranks on any node
  int nodes = 1;
  int cores_per_node = 0;  // hardware threads of a node (0: unknown); more ranks than that wait by sleeping
  std::string cpu_vendor;  // the nodes' CPU vendor id ("GenuineIntel", "AuthenticAMD"; empty: unknown)
};
// A group of `ranks` on nodes like this machine: its hardware threads and CPU vendor filled in, as the
// host backend builds its table, so that a plan or prediction made here shows what a backend runs.
GroupShape LocalGroupShape(int ranks, int ranks_per_node, int nodes);

inline constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

struct CountRange {
  int min = 0;
  int max = INT_MAX;  // inclusive
  bool Contains(int v) const { return v >= min && v <= max; }
  bool operator==(const CountRange&) const = default;
};

struct Params {
  std::size_t segment_bytes = 0;     // pipelining piece; 0: the backend's own
  std::optional<CollectiveAlgorithm> between;  // hierarchical: the algorithm among the nodes' leaders
  bool operator==(const Params&) const = default;
};

struct Rule {
  std::string backend;               // "" : every backend that has `algorithm`
  CollectiveKind collective = CollectiveKind::kAllreduce;
  std::optional<MemoryKind> memory;  // nullopt: host and device memory
  std::size_t min_bytes = 0;         // inclusive
  std::size_t max_bytes = kNoLimit;  // exclusive; kNoLimit: no upper bound
  CountRange ranks, ranks_per_node, nodes;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  Params params;
  Source source = Source::kDefault;
  std::string why;                   // "COMMKIT_TUNE item 2 'allreduce:0-64K:ring'"
  double predicted_s = -1;           // topology / calibration rules: the model's time at min_bytes
};

// Parses a COMMKIT_TUNE value. `origin` names it in errors ("COMMKIT_TUNE"). Errors are
// InvalidArgument and say which item, what is wrong, where in the text and what to write instead.
Result<std::vector<Rule>> ParseSpec(std::string_view text, std::string_view origin = "COMMKIT_TUNE");
// "64K", "1M", "0", "4096", "16KiB" (binary multiples); nullopt on garbage or overflow.
std::optional<std::size_t> ParseBytes(std::string_view text);
// A rule back in the grammar (round-trips through ParseSpec).
std::string FormatRule(const Rule& rule);

// The algorithms `backend` can run for `collective` in a group of `shape` (empty: not tunable).
std::vector<CollectiveAlgorithm> Algorithms(std::string_view backend, CollectiveKind collective,
                                            const GroupShape& shape);
// The largest call (bytes per rank) that `algorithm` runs as itself; a larger call the table gives it
// runs another way. The mpi and gloo backends' `flat` moves through the shared-memory slots (64 KiB,
// less in groups of about 60 ranks and more); kNoLimit for everything else. Calibration measures an
// algorithm and the table chooses it only up to here.
std::size_t AlgorithmMaxBytes(std::string_view backend, CollectiveAlgorithm algorithm, const GroupShape& shape);

// ---- calibration: a measured alpha/beta per (backend, algorithm, ranks), cached per machine ----
struct Fit {
  std::string backend;
  CollectiveKind collective = CollectiveKind::kAllreduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  int ranks = 2;
  std::size_t min_bytes = 0;         // the sizes this fit was measured on: [min, max)
  std::size_t max_bytes = kNoLimit;
  double alpha_s = 0;   // time of an empty call
  double beta_Bps = 0;  // bytes per second beyond it: t(n) = alpha + n / beta
  int samples = 0;
  bool operator==(const Fit&) const = default;
};

struct Calibration {
  std::string hostname;
  std::string version;  // commkit's
  std::string created;  // UTC, ISO 8601
  std::vector<Fit> fits;
  // The fit for this backend/collective/algorithm/ranks whose size range holds `bytes` (the nearest
  // one when none does), or null.
  const Fit* Find(std::string_view backend, CollectiveKind collective, CollectiveAlgorithm algorithm, int ranks,
                  std::size_t bytes) const;
};

// $COMMKIT_TUNE_CACHE when set (a file; "off" disables the cache), else
// $XDG_CACHE_HOME/commkit/calibration-<hostname>-<version>.json, else ~/.cache/commkit/...; empty
// when none can be named.
std::filesystem::path CalibrationPath();
// This host's name as the cache keys it (characters other than [A-Za-z0-9._-] become '_').
std::string CalibrationHostname();
// nullopt when the file is absent or the cache is off. A file that is unreadable, malformed, of
// another format version, commkit version or host is an error saying so (callers that only read the
// cache ignore it with a warning: a stale cache never stops a job; delete it or recalibrate).
Result<std::optional<Calibration>> LoadCalibration(const std::filesystem::path& path);
// Writes atomically (temporary file + rename), creating the directory.
Status SaveCalibration(const std::filesystem::path& path, const Calibration& calibration);
std::string SerializeCalibration(const Calibration& calibration);
Result<Calibration> ParseCalibration(std::string_view text, std::string_view origin);
// alpha/beta from (bytes, seconds) samples, minimising the summed |log(predicted/measured)| so that
// a few stalled samples (a shared machine) do not move the fit. Only alpha, beta and samples are set.
// The line is used from `from_bytes` on (default: the smallest sample): it may have a negative alpha
// (a cache knee inside the sizes) but never predicts below the smallest sample's time scaled down
// with the size there.
Fit FitSamples(const std::vector<std::pair<double, double>>& samples, double from_bytes = -1);
// Piecewise fits over the size axis (cut at 64 KiB and then every 4x up to 16 MiB, where caches and
// protocols change; a piece with one sample joins its neighbour), each from the samples in its piece;
// key fields copied from `key`.
std::vector<Fit> FitPieces(const Fit& key, const std::vector<std::pair<double, double>>& samples);
double PredictSeconds(const Fit& fit, double bytes);

// ---- the table ----
// Select is called on every collective: a Choice holds no allocation; `why` points into the Table.
struct Choice {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  Params params;
  Source source = Source::kDefault;
  std::string_view why;
};

struct TableOptions {
  // nullopt: read COMMKIT_TUNE / the deprecated variables, the calibration cache and the topology.
  std::optional<std::string> spec;                 // a COMMKIT_TUNE value to use instead of the env
  bool legacy_env = true;                          // translate the deprecated variables
  std::optional<Calibration> calibration;          // instead of reading the cache
  bool read_cache = true;
  // Across nodes: the network link's bytes/s and latency (nullopt: probe this host's topology).
  std::optional<double> network_Bps, network_alpha_s;
  std::string network_derivation;
  // Across nodes, every rank must plan alike: rank 0 publishes its network numbers under
  // "tune/network" in this store and the others use them.
  std::shared_ptr<Store> store;
  int rank = 0;
  std::chrono::milliseconds timeout{60000};
};

// A spec that this process uses instead of COMMKIT_TUNE (tools that calibrate force each algorithm in
// turn with it); nullopt goes back to the environment.
void SetProcessSpec(std::optional<std::string> spec);

class Table {
 public:
  // The table for one group of `backend`. Errors: a malformed COMMKIT_TUNE or deprecated variable,
  // or an item that names this backend with an algorithm it does not have.
  static Result<Table> ForGroup(std::string_view backend, const GroupShape& shape, const TableOptions& options = {});
  // ForGroup where a backend is created: the group's store, rank and timeout from `ctx` (so every
  // rank plans alike), everything else from the environment, the cache and the topology.
  static Result<Table> ForBackend(std::string_view backend, const BackendContext& ctx, const GroupShape& shape);

  // The algorithm for one call. Collectives the table does not tune return the backend's only one
  // with source kDefault.
  Choice Select(CollectiveKind collective, MemoryKind memory, std::size_t bytes) const;

  // The predicted time of `algorithm` at `bytes` (calibration first, then the cost model); < 0 when
  // neither covers this backend/algorithm/shape. The string says which ("calibration: ...").
  std::pair<double, std::string> Predict(CollectiveKind collective, CollectiveAlgorithm algorithm,
                                         std::size_t bytes) const;

  // Whether any rule for `collective` in this group chooses `algorithm` (a backend that must prepare
  // for an algorithm at connect asks this).
  bool Uses(CollectiveKind collective, CollectiveAlgorithm algorithm) const;

  std::string_view backend() const { return backend_; }
  const GroupShape& shape() const { return shape_; }
  // Every rule that applies to this group, lowest precedence first.
  const std::vector<Rule>& rules() const { return rules_; }
  // Notes gathered while building (a stale cache ignored, a network speed guessed).
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  std::string backend_;
  GroupShape shape_;
  std::vector<Rule> rules_;
  // Select's index, built once: per collective and memory kind, the sizes where the winning rule
  // changes and that rule (-1: none), so a call looks its algorithm up in O(log rules).
  struct Interval {
    std::size_t start;
    int rule;
  };
  std::array<std::vector<Interval>, 2 * kNumCollectiveKinds> index_;
  std::array<CollectiveAlgorithm, kNumCollectiveKinds> only_{};  // where no rule applies
  void BuildIndex();
  std::vector<std::string> notes_;
  std::optional<Calibration> calibration_;
  // Across nodes: the network link the topology rules were planned with (bytes/s, seconds).
  double network_Bps_ = 0, network_alpha_s_ = 0;
};

// ---- the plan: what runs at each size and why ----
struct PlanRow {
  std::string backend;
  CollectiveKind collective = CollectiveKind::kAllreduce;
  MemoryKind memory = MemoryKind::kHost;
  std::size_t min_bytes = 0, max_bytes = 0;  // the bucket, inclusive
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  Params params;
  Source source = Source::kDefault;
  std::string why;
  double predicted_min_s = -1, predicted_max_s = -1;  // at min_bytes and max_bytes; < 0 unknown
  std::string predicted_by;                            // "calibration", "cost model (...)"
};
// One row per run of consecutive power-of-two sizes in [min_bytes, max_bytes] with the same choice.
std::vector<PlanRow> Plan(const Table& table, CollectiveKind collective, MemoryKind memory, std::size_t min_bytes,
                          std::size_t max_bytes);
std::string PlanText(const std::vector<PlanRow>& rows);
// One line for a log: "flat 0 B..64 KiB (default), sliced 128 KiB..1 GiB (default)".
std::string Describe(const Table& table, CollectiveKind collective, MemoryKind memory);
std::string PlanJson(const std::vector<PlanRow>& rows);  // one JSON array

// ---- what the backends ran: counters a test or a tool can read ----
void NoteRun(std::string_view backend, CollectiveAlgorithm algorithm);
std::uint64_t RunCount(std::string_view backend, CollectiveAlgorithm algorithm);

}  // namespace commkit::tune
