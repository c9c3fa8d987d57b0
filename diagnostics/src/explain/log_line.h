// One log line with its prefix taken apart: torchrun "[rankN]:" / "[default3]:", srun "--label" "12: ",
// NCCL "host:pid:tid [dev]", glog "[E1218 20:27:21.42 File.cpp:629]", ISO / syslog timestamps, and JSON
// log records ({"message": ..., "rank": ...}). Scanning is hand-written and linear in the line length.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace commkit::diagnostics::explain {

struct LogLine {
  int number = 0;        // 1-based
  int source = 0;        // index of the input
  std::string raw;       // the line as read, cut at kMaxExplainLineBytes
  std::string body;      // the message after the prefixes
  std::string host;
  int rank = -1;         // from "[rankN]:", "[Rank N]", JSON "rank", srun label
  int cuda_device = -1;  // NCCL "[n]"
  bool nccl_warn = false, nccl_info = false;
  std::string nccl_file;  // "transport/nvls.cc:165" printed before NCCL WARN
  char glog_level = 0;   // 'E', 'W', 'I' from glog / c10d prefixes
};

// Splits text into lines (\n, \r\n), at most max_lines, each cut at kMaxExplainLineBytes.
std::vector<LogLine> ReadLogLines(std::string_view text, int source, std::size_t max_lines);

// Lower-case ASCII copy (bodies are matched case-insensitively by the cause rules).
std::string Lower(std::string_view s);
bool Contains(std::string_view hay, std::string_view needle);

}  // namespace commkit::diagnostics::explain
