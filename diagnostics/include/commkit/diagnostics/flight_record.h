// Reading the flight recorder dumps of all ranks of a job (comm/flight_recorder.h) and saying which
// rank stopped or diverged, and at which operation.
//
//   auto dumps = LoadFlightDumps({"/tmp/commkit-flight-1234"});   // files or directories
//   FlightVerdict v = AnalyzeFlightDumps(dumps->dumps);
//   std::cout << v.ToText();   // "rank 2 never called allreduce #13 (f32 x 16, sum) that ranks 0, 1, 3 wait in"
//
// Per group (a job's world and each split are analysed separately), comparing collective sequence
// numbers, which every rank of a group shares:
// - diverged: at the same sequence number ranks called different collectives (op, type, count, root
//   or reduction differ): the earliest such operation, the ranks on each side;
// - stopped: a rank's last collective is behind the others' while they have not completed the next
//   one (they are waiting for it): the rank, the operation it never called and its last one;
// - missing: ranks of the group without a dump (dead, hung without dumping, or not collected);
// - failed: every rank reached the same operation and it failed (the error of each rank);
// - stuck: every rank is inside the same operation and none finished it (a hang inside the backend
//   or the network rather than a rank that stopped).
// Nothing of these: the ranks agree (exit code 0).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/flight_recorder.h"
#include "commkit/common/status.h"

namespace commkit::diagnostics {

// Largest dump file read (2048 entries are ~0.6 MB; COMMKIT_FLIGHT_RECORDER_ENTRIES is at most 65536).
inline constexpr std::size_t kMaxFlightDumpBytes = 64u << 20;

// True when `text` is a flight recorder dump: a JSON object whose first key is "commkit_flight_recorder"
// (cheap: looks at the first bytes only). Explain's file loading dispatches on it.
bool IsFlightRecordDocument(std::string_view text);

struct LoadedFlightDumps {
  std::vector<FlightDump> dumps;
  std::vector<std::string> warnings;  // skipped files of a directory, ...
};
// Each path is a dump file or a directory whose *.json files are read (other JSON files in a
// directory are skipped with a warning; a named file that is not a dump is an error).
// Errors: unreadable or malformed input, or no dump at all (InvalidArgument / DataLoss, naming the file).
Result<LoadedFlightDumps> LoadFlightDumps(const std::vector<std::filesystem::path>& paths);

enum class FlightFindingKind { kDiverged, kStopped, kMissing, kFailed, kStuck };
std::string_view ToString(FlightFindingKind kind);

struct FlightFinding {
  FlightFindingKind kind = FlightFindingKind::kStuck;
  std::vector<int> ranks;      // the ranks the finding names (the culprits)
  std::vector<int> others;     // the other side (diverged: the majority; stopped: the waiting ranks)
  std::uint64_t sequence = 0;  // the collective it is about (0: none)
  std::string operation;       // "allreduce #13 (f32 x 16, sum)"
  std::string message;         // one or two sentences
};

struct FlightRankSummary {
  int rank = 0;
  bool present = false;
  std::string host, source, reason;
  std::int64_t pid = 0;
  std::uint64_t last_enqueued = 0, last_started = 0, last_completed = 0;  // collective sequences
  std::string last_operation;  // the highest collective recorded, described
  std::string last_state;      // its state ("failed (Timeout)")
  std::string pending_p2p;     // send/recv not completed, described
};

struct FlightGroupVerdict {
  std::string group;
  std::string backend;
  int world_size = 0;
  std::vector<FlightRankSummary> ranks;  // one per rank of the group
  std::vector<FlightFinding> findings;   // most telling first
  std::string headline;                  // the verdict in one sentence
};

struct FlightVerdict {
  std::vector<FlightGroupVerdict> groups;
  std::vector<std::string> warnings;
  // 0: the ranks agree; 1: a rank diverged, stopped, is missing, or the operation failed or hangs.
  int ExitCode() const;
  std::string ToText() const;
  std::string ToJson() const;  // schema "commkit.flight_verdict/1"
};

FlightVerdict AnalyzeFlightDumps(const std::vector<FlightDump>& dumps);

// For explain: parses documents (source name, text) that IsFlightRecordDocument() accepted and analyses them together.
Result<FlightVerdict> ExplainFlightRecords(const std::vector<std::pair<std::string, std::string>>& documents);

}  // namespace commkit::diagnostics
