// Per-group collective metrics in the Prometheus text exposition format (0.0.4).
//
// Every ProcessGroup counts, per collective kind, the operations it completed, the failures, the
// payload bytes and a latency histogram (log2 buckets from 1 us to ~8.4 s), and the time of its last
// progress (the last operation that completed). The counters are relaxed atomics written by one
// thread at a time, so the hot path pays a few plain stores.
//
// Exposure: COMMKIT_METRICS_FILE=/path/commkit.prom makes the process write the metrics of all its
// live groups to that file (write to a temporary file, then rename: a node_exporter textfile
// collector never reads a partial file) every COMMKIT_METRICS_INTERVAL (default 15s), when a group
// is destroyed, and at exit. "{rank}" and "{pid}" in the path are replaced by the launcher's rank and
// the process id, so ranks sharing a node do not overwrite each other. See docs/metrics.md.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commkit/comm/types.h"
#include "commkit/common/status.h"

namespace commkit {

// Builds a Prometheus text exposition. Families are written in the order they are opened; every
// sample of a family must follow its Family() call.
class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram, untyped).
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // "name{k="v",...} value". Label values are escaped; names are the caller's constants.
  void Sample(std::string_view name, const Labels& labels, double value);
  const std::string& str() const { return out_; }

  // Label values: backslash, double quote and newline escaped as \\, \" and \n.
  static std::string EscapeLabelValue(std::string_view value);
  // HELP text: backslash and newline escaped.
  static std::string EscapeHelp(std::string_view help);
  // Integers without exponent, otherwise the shortest round-trip form; +Inf, -Inf, NaN.
  static std::string FormatValue(double value);
  // [a-zA-Z_:][a-zA-Z0-9_:]* (metric names) and [a-zA-Z_][a-zA-Z0-9_]* (label names).
  static bool IsValidMetricName(std::string_view name);
  static bool IsValidLabelName(std::string_view name);

 private:
  std::string out_;
};

// Counters with one writer at a time and any number of readers: relaxed load + store instead of an
// atomic read-modify-write (a locked instruction), which is what the hot path can afford. ProcessGroup
// runs one operation of a kind at a time (collectives in order, sends and receives each in order),
// and successive writers are ordered by its own synchronization.
inline void BumpCounter(std::atomic<std::uint64_t>& counter, std::uint64_t by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// A latency histogram with log2 buckets: bucket i counts latencies <= 2^i microseconds
// (i = 0..kBuckets-1), the last slot those above. One writer at a time (see BumpCounter).
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 24;  // 1 us .. 2^23 us (~8.4 s), then +Inf
  static int BucketOf(std::int64_t nanoseconds);
  static double UpperBoundSeconds(int bucket) { return static_cast<double>(std::uint64_t{1} << bucket) / 1e6; }

  void Record(std::int64_t nanoseconds) {
    BumpCounter(counts_[static_cast<std::size_t>(BucketOf(nanoseconds))], 1);
    BumpCounter(sum_ns_, static_cast<std::uint64_t>(nanoseconds < 0 ? 0 : nanoseconds));
  }
  // Non-cumulative counts (kBuckets + 1 values) and the sum in seconds.
  std::array<std::uint64_t, kBuckets + 1> Counts() const;
  double SumSeconds() const { return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9; }

 private:
  std::array<std::atomic<std::uint64_t>, kBuckets + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

// The counters of one process group (one rank of it). Fed by its FlightRecorder.
class GroupMetrics {
 public:
  struct Labels {
    std::string group;
    int rank = 0;
    int size = 1;
    std::string backend;
  };
  explicit GroupMetrics(Labels labels);

  const Labels& labels() const { return labels_; }

  // Hot path (one writer per kind at a time): an operation of `kind` started / finished after
  // `latency_ns`, moving `bytes`; `now_ticks` is the recorder's clock (comm/src/pg/flight_clock.h).
  void Started(CollectiveKind kind) { BumpCounter(kinds_[static_cast<std::size_t>(kind)].started, 1); }
  void Finished(CollectiveKind kind, std::uint64_t bytes, std::int64_t latency_ns, bool ok, std::int64_t now_ticks) {
    PerKind& k = kinds_[static_cast<std::size_t>(kind)];
    BumpCounter(k.bytes, bytes);
    if (!ok) BumpCounter(k.failures, 1);
    k.latency.Record(latency_ns);
    BumpCounter(k.finished, 1);
    last_progress_ticks_.store(now_ticks, std::memory_order_relaxed);
  }

  std::uint64_t Count(CollectiveKind kind) const;  // finished operations
  std::uint64_t Bytes(CollectiveKind kind) const;
  std::uint64_t Failures(CollectiveKind kind) const;
  std::uint64_t InFlight() const;
  // Unix ns of the last completed operation, or of the group's creation before the first one.
  std::int64_t LastProgressUnixNs() const;
  const LatencyHistogram& Latency(CollectiveKind kind) const { return kinds_[static_cast<std::size_t>(kind)].latency; }

 private:
  struct PerKind {
    std::atomic<std::uint64_t> started{0};
    std::atomic<std::uint64_t> finished{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> failures{0};
    LatencyHistogram latency;
  };
  Labels labels_;
  std::array<PerKind, kNumCollectiveKinds> kinds_{};
  std::atomic<std::int64_t> last_progress_ticks_{0};
};

// A complete exposition of the given groups (HELP/TYPE once per family).
std::string RenderMetrics(const std::vector<std::shared_ptr<const GroupMetrics>>& groups,
                          std::int64_t now_unix_ns);

// Process-wide: the metrics of every live group, and the COMMKIT_METRICS_FILE writer.
class MetricsRegistry {
 public:
  static MetricsRegistry& Get();
  // Adds a live group. Starts the periodic writer on the first registration when
  // COMMKIT_METRICS_FILE is set.
  void Register(std::shared_ptr<const GroupMetrics> metrics);
  // Writes the file once more with the group's final values, then removes it; the last group's
  // removal stops the writer.
  void Unregister(const GroupMetrics* metrics);
  std::string Render() const;
  // Writes Render() to `path` atomically (temporary file in the same directory, then rename).
  static Status WriteFile(const std::filesystem::path& path, std::string_view text);
  // The configured file ("" when unset) with {rank} and {pid} substituted.
  static Result<std::string> FileFromEnvironment();
  // COMMKIT_METRICS_FILE / COMMKIT_METRICS_INTERVAL are valid (for ProcessGroup::Create).
  static Status CheckEnvironment();

  struct State;

 private:
  MetricsRegistry();
  State* state_;  // process lifetime
};

// Unix time in nanoseconds (the clock the recorder and the metrics stamp events with).
inline std::int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace commkit
