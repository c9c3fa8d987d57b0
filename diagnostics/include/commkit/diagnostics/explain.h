// Log explainer: reads NCCL (NCCL_DEBUG=INFO/WARN) and PyTorch watchdog output and names the first
// real error (not the envelope such as ncclInternalError / "unhandled system error"), a root cause,
// a fix and a confidence, with the evidence lines. Pure function of the text; never throws.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace commkit::diagnostics {

enum class Confidence { kNone, kLow, kMedium, kHigh };
const char* ToString(Confidence confidence);

struct EvidenceLine {
  int line = 0;  // 1-based line number in the input
  std::string text;
};

struct Diagnosis {
  std::string signature;  // "shm.enospc", "socket.no_interface"...; empty with kNone
  std::string cause;
  std::string fix;
  Confidence confidence = Confidence::kNone;
  std::vector<EvidenceLine> evidence;
};

struct LogFacts {
  std::vector<std::string> nccl_versions;
  std::vector<std::string> hosts;
  std::vector<int> ranks;                // cuda device indices "[n]" seen
  std::vector<std::string> transports;   // "Socket", "IB", "OFI", "P2P", "SHM"
  std::vector<std::string> interfaces;   // from NET/Socket : Using / Bootstrap : Using
  EvidenceLine first_error;              // first WARN/error line that is not an envelope
};

struct Explanation {
  LogFacts facts;
  std::vector<Diagnosis> diagnoses;  // best first; empty = "no confident claim"
  const Diagnosis* Best() const { return diagnoses.empty() ? nullptr : &diagnoses.front(); }
  std::string ToText() const;
  std::string ToJson() const;
};

Explanation ExplainLog(std::string_view text);

}  // namespace commkit::diagnostics
