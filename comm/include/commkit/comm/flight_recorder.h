// Flight recorder: every process group keeps the last N operations it was asked for (sequence, op,
// type, count, root/peer, enqueue/start/end times, state) in a ring, and writes them as JSON when
// an operation fails (once per group), on a signal (SIGUSR1 by default) and on request. The dumps of
// all ranks, read together by `gpudoctor flight`, say which rank stopped or diverged and at which
// operation. Every backend runs through ProcessGroup, so gloo, mpi, host and nccl are all covered.
//
// Cost: the ring is written with relaxed atomic stores (no lock): one slot of one cache line per
// operation at submit, two more stores at start and at completion; an operation that runs on the
// submitting thread writes its slot once, at start (Begin). Two clock reads per operation, which
// also time it for the metrics and the Work (docs/flight-recorder.md has the measurement).
//
// Environment (read when a group is created; invalid values fail ProcessGroup::Create):
//   COMMKIT_FLIGHT_RECORDER_ENTRIES  ring size per group (default 2048; 0 disables the recorder)
//   COMMKIT_FLIGHT_RECORDER_DIR      where dumps go (default $TMPDIR or /tmp, then
//                                    commkit-flight-<job id> or commkit-flight-uid<uid>); an empty
//                                    value disables automatic dumps (DumpFlightRecord(dir) still works)
//   COMMKIT_FLIGHT_RECORDER_SIGNAL   USR1 (default), USR2, a number, or "off". Unset: installed only
//                                    when the signal has no handler yet; set: installed regardless.
//   COMMKIT_FLIGHT_RECORDER_DUMP_ON_FAILURE  1 (default) / 0
//
// Dump file: <dir>/<group>-rank<rank>.json ('/' in the group name becomes '_'), written atomically
// (temporary file, rename). Format: docs/flight-recorder.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/metrics.h"
#include "commkit/common/status.h"

namespace commkit {

enum class FlightState : std::uint8_t { kScheduled = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };
std::string_view ToString(FlightState state);

struct FlightRecorderOptions {
  std::size_t entries = 2048;
  std::string dump_dir;  // "" = no automatic dumps
  bool dump_dir_is_default = false;  // made private (0700) and must belong to this user
  bool dump_on_failure = true;
  int signal = 0;             // 0: none
  bool signal_forced = false;  // install even when the application has a handler
};
// From the environment variables above. InvalidArgument names the variable and the value.
Result<FlightRecorderOptions> FlightRecorderOptionsFromEnvironment();

// One recorded operation.
struct FlightRecord {
  std::uint64_t sequence = 0;  // the group's collective sequence, or its point-to-point sequence
  bool p2p = false;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceKind reduce = ReduceKind::kSum;
  MemoryKind memory = MemoryKind::kHost;
  int root = 0;
  int peer = -1;
  int tag = 0;
  std::uint64_t count = 0;  // elements (v-collectives: the sum of the counts)
  std::uint64_t fingerprint = 0;
  FlightState state = FlightState::kScheduled;
  StatusCode error = StatusCode::kOk;
  std::int64_t enqueued_ns = 0, started_ns = 0, ended_ns = 0;  // unix ns; 0: not (yet)
};

// A parsed dump (one group, one rank).
struct FlightDump {
  int version = 0;
  int rank = 0;
  int world_size = 0;
  std::string group, backend, host, job, reason, failure;
  std::int64_t pid = 0;
  std::int64_t dumped_ns = 0;
  std::uint64_t capacity = 0;
  std::uint64_t collectives = 0;   // the highest collective sequence recorded
  std::uint64_t p2p_operations = 0;  // the highest point-to-point sequence recorded
  std::vector<FlightRecord> entries;  // oldest first
  std::string source;  // where it was read from (set by the caller)
};

inline constexpr int kFlightRecorderVersion = 1;
// The JSON document's top-level key.
inline constexpr std::string_view kFlightRecorderKey = "commkit_flight_recorder";

std::string FlightDumpToJson(const FlightDump& dump);
// DataLoss for malformed documents (what is wrong and where); never throws.
Result<FlightDump> ParseFlightDump(std::string_view json);

class FlightRecorder {
 public:
  struct GroupInfo {
    int rank = 0;
    int size = 1;
    std::string group = "world";
    std::string backend;
  };
  // Registers the group for signal dumps and metrics (MetricsRegistry) until destroyed.
  static std::shared_ptr<FlightRecorder> Create(GroupInfo info, FlightRecorderOptions options);
  // Create() with FlightRecorderOptionsFromEnvironment() (defaults if invalid: Create() of the group
  // checked it with CheckEnvironment()).
  static std::shared_ptr<FlightRecorder> FromEnvironment(GroupInfo info);
  // Validates every variable the recorder and the metrics read.
  static Status CheckEnvironment();
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Hot path. Scheduled: at submit, after the sequence number is assigned. Started: when the
  // operation begins to run; returns its start time (clock ticks) for Finished. Begin: both at once,
  // for an operation that runs on the submitting thread right away (one clock read, one slot write).
  // Finished: with its status; the first failure writes a dump (when enabled); returns its end time
  // (clock ticks), so the caller can time the operation without reading a clock of its own.
  void Scheduled(const CollectiveArgs& args);
  std::int64_t Started(const CollectiveArgs& args);
  std::int64_t Begin(const CollectiveArgs& args);
  std::int64_t Finished(const CollectiveArgs& args, std::int64_t started, const Status& status);
  // Nanoseconds between two values that Started/Begin/Finished returned.
  static std::int64_t TicksToNanos(std::int64_t ticks);

  // The ring's current content (both rings, oldest first by enqueue time) plus the group's facts.
  FlightDump Snapshot(std::string_view reason) const;
  std::string ToJson(std::string_view reason) const { return FlightDumpToJson(Snapshot(reason)); }
  // Writes <dir>/<group>-rank<rank>.json (dir: the configured one when empty). Returns the path.
  Result<std::filesystem::path> Dump(std::string_view reason, const std::filesystem::path& dir = {}) const;
  // The file name a dump of this group gets.
  std::string DumpFileName() const;

  const GroupInfo& info() const { return info_; }
  const FlightRecorderOptions& options() const { return options_; }
  GroupMetrics& metrics() { return *metrics_; }
  const std::shared_ptr<GroupMetrics>& shared_metrics() const { return metrics_; }

  // One ring slot: a cache line of relaxed atomics. `word` = sequence << 16 | error << 8 | state
  // (state 0: being written); the times are clock ticks (converted to unix ns by Snapshot).
  struct Slot {
    std::atomic<std::uint64_t> word{0};
    std::atomic<std::uint64_t> desc{0};  // kind | dtype << 8 | reduce << 16 | memory << 24 | root << 32
    std::atomic<std::uint64_t> peer_tag{0};
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> fingerprint{0};
    std::atomic<std::int64_t> enqueued_ns{0}, started_ns{0}, ended_ns{0};
  };

 private:
  FlightRecorder(GroupInfo info, FlightRecorderOptions options);
  Slot* SlotFor(bool p2p, std::uint64_t seq) const;
  // Writes the slot of `args` in `state` (kScheduled or kStarted), enqueued (and started) at `now`.
  void Write(const CollectiveArgs& args, FlightState state, std::int64_t now);
  void DumpOnFailure(const CollectiveArgs& args, const Status& status);

  GroupInfo info_;
  FlightRecorderOptions options_;
  std::size_t capacity_ = 0;
  std::unique_ptr<Slot[]> collectives_, p2p_;
  std::shared_ptr<GroupMetrics> metrics_;
  std::atomic<bool> failure_dumped_{false};
  mutable std::mutex failure_mu_;
  std::string failure_;  // the first failure's message
};

// Dumps every live group of this process (what the signal does). Returns the files written; groups
// whose dump failed are logged. `dir`: the configured directory when empty.
std::vector<std::filesystem::path> DumpFlightRecorders(std::string_view reason, const std::filesystem::path& dir = {});

}  // namespace commkit
