// Small string helpers (g++ 12 has no std::format; public headers may not include fmt).
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

// StrCat("rank ", 3, "/", 8) == "rank 3/8": anything with operator<<.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::vector<std::string> Split(std::string_view text, char sep, bool skip_empty = false);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
// JoinValues({0, 1, 5}, ",") == "0,1,5": anything with operator<<.
template <typename T>
std::string JoinValues(const std::vector<T>& parts, std::string_view sep) {
  std::ostringstream out;
  for (std::size_t i = 0; i < parts.size(); ++i) out << (i == 0 ? std::string_view() : sep) << parts[i];
  return out.str();
}
std::string_view Trim(std::string_view text);
bool StartsWith(std::string_view text, std::string_view prefix);
bool EndsWith(std::string_view text, std::string_view suffix);
std::string ToLower(std::string_view text);

// Strict integer parsing: the whole (trimmed) text must be a base-10 integer in range.
std::optional<std::int64_t> ParseInt(std::string_view text);
std::optional<double> ParseDouble(std::string_view text);
// A byte count with an optional binary suffix: "8", "64K", "1.5k", "16KiB", "4MB", "2G", "1T" (sysfs
// writes cache sizes as "32768K"). InvalidArgument "bad size '<text>': <why> (...)" otherwise.
Result<std::size_t> ParseByteSize(std::string_view text);

// POSIX shell quoting, as Python's shlex.quote: unchanged when only [A-Za-z0-9_@%+=:,./-], '' when
// empty, else single-quoted with ' written as '"'"'.
std::string ShellQuote(std::string_view word);

// "1.5 GiB", "512 KiB", "17 B"
std::string HumanBytes(double bytes);
// "250 ms", "30 s", "1.2 us"
std::string HumanSeconds(double seconds);

}  // namespace commkit
