// Log explainer: reads NCCL / CUDA / PyTorch (c10d, elastic) / aws-ofi-nccl / libfabric output, one log or
// several (one per rank or host), and ranks candidate root causes.
//
// How it works: every line is stripped of its prefix (torchrun "[rankN]:", NCCL "host:pid:tid [dev]",
// timestamps, glog, JSON log records) and matched against a catalog of the format strings those libraries
// print, generated from their sources (scripts/gen_message_catalog.py). The matches and the raw text give
// facts (versions, variables NCCL echoes, interfaces, IB devices and link layer, errnos, per-rank
// process-group sequence numbers); cause rules score hypotheses from messages and facts together. A
// cause gets `high` only when the log itself proves it; signatures whose cause is not settled in public
// threads never do. Pure functions of the text; never throw; linear in the input size.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::diagnostics {

enum class Confidence { kNone, kLow, kMedium, kHigh };
const char* ToString(Confidence confidence);

struct EvidenceLine {
  int line = 0;        // 1-based line number in its source
  std::string text;    // the line as written (capped at kMaxExplainLineBytes)
  std::string source;  // input name when several logs are explained; empty for one
};

// A candidate root cause. `signature` is a cause-family id from docs/gpudoctor.md ("shm.space", ...).
struct Diagnosis {
  std::string signature;
  std::string cause;    // what happened, with the values the log shows
  std::string fix;
  std::string confirm;  // what to run to confirm (a gpudoctor check id, ibv_devinfo -v, show_gids, ...)
  std::string basis;    // where the cause -> fix mapping comes from (documentation / settled thread)
  Confidence confidence = Confidence::kNone;
  int score = 0;        // 0..100, orders candidates; confidence is derived from it and the proof rules
  std::vector<EvidenceLine> evidence;
};

// Where one rank's process group stood when it reported (watchdog / flight-recorder lines).
struct RankProgress {
  int rank = -1;
  std::string source;
  long long seq = -1;  // SeqNum of the timed-out / last work
  std::string op;      // OpType
  long long last_enqueued = -1, last_completed = -1;
  int line = 0;
  std::string text;  // the line that reported it
};

struct LogFacts {
  std::vector<std::string> nccl_versions;
  std::vector<std::string> cuda_versions;    // "cudaDriverVersion 12020", "CUDA Driver version 12.2" ...
  std::vector<std::string> hosts;
  std::vector<int> ranks;                    // ranks seen in prefixes / messages
  std::vector<int> cuda_devices;             // NCCL "[n]" device indices
  std::vector<std::string> transports;       // "Socket", "IB", "OFI", "P2P", "SHM", "NVLS", ...
  std::vector<std::string> interfaces;       // names NCCL / Gloo said they use
  std::vector<std::string> ib_devices;       // "mlx5_0:1/RoCE"
  std::vector<std::string> link_layers;      // "IB", "RoCE"
  std::vector<std::string> gids;             // GIDs printed (localGid / remoteGids / GID lines)
  std::vector<std::string> errnos;           // "ENOSPC", "ECONNREFUSED", ...
  std::map<std::string, std::string> env;    // "NCCL_SOCKET_IFNAME" -> "eth0" (set by environment to)
  std::vector<RankProgress> progress;
  EvidenceLine first_error;                  // first real error: not an envelope, not a header line
  int lines = 0;
  int recognised = 0;                        // lines that matched a catalog message
};

// One input's summary and what made it stand out from the others.
struct Divergence {
  std::string kind;    // "stopped_earlier", "different_op", "died_first", "transport", "nccl_version"
  std::string source;  // the input (or rank) that diverged
  std::string detail;
  std::vector<EvidenceLine> evidence;
};

struct Explanation {
  LogFacts facts;
  std::vector<Diagnosis> diagnoses;  // best first; empty = "no confident claim"
  std::vector<Divergence> divergences;
  std::vector<std::string> sources;  // input names (several logs)
  const Diagnosis* Best() const { return diagnoses.empty() ? nullptr : &diagnoses.front(); }
  std::string ToText() const;
  std::string ToJson() const;
};

inline constexpr std::size_t kMaxExplainLineBytes = 4096;        // longer lines are cut (evidence keeps the head)
inline constexpr std::size_t kMaxExplainInputBytes = 64u << 20;  // per input file
inline constexpr std::size_t kMaxExplainInputs = 4096;

struct LogInput {
  std::string name;
  std::string text;
};

Explanation ExplainLog(std::string_view text);
Explanation ExplainLogs(const std::vector<LogInput>& inputs);

// What `gpudoctor explain FILE...` reads: plain logs, and JSON documents with a top-level key
// "commkit_flight_recorder" (per-rank flight-recorder dumps) kept apart for their own reader.
struct ExplainInputs {
  std::vector<LogInput> logs;
  std::vector<LogInput> flight_records;
};
// Classifies one input by content (a flight-recorder document or a log).
void AddExplainInput(ExplainInputs& inputs, LogInput input);
// Reads each path ("-" = `stdin`, read up to kMaxExplainInputBytes) with commkit::ReadRegularFile:
// directories, FIFOs, devices and oversize files are refused with an error naming the path.
Result<ExplainInputs> LoadExplainInputs(const std::vector<std::string>& paths, std::istream& stdin_stream);

}  // namespace commkit::diagnostics
