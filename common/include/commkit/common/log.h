// Leveled logging to stderr. COMMKIT_LOG=error|warn|info|debug (default warn), read once.
// Lines look like: "[commkit W 12:00:01.123 host-b rank 3/8 tcp_store.cc:42] message".
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "commkit/common/strings.h"

namespace commkit {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

std::string_view ToString(LogLevel level);

// The level in force: COMMKIT_LOG on first use (an invalid value is reported once and ignored),
// or the last SetLogLevel().
LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
inline bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(GetLogLevel()); }

// Adds "rank R/N" to every line from now on (rank < 0 removes it). Thread-safe.
void SetLogRank(int rank, int size);

// Replaces the stderr sink (tests capture lines); nullptr restores stderr. Thread-safe.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;
void SetLogSink(LogSink sink);

void LogMessage(LogLevel level, const char* file, int line, std::string_view message);

}  // namespace commkit

#define COMMKIT_LOG(level, ...)                                                                 \
  do {                                                                                          \
    if (::commkit::LogEnabled(level))                                                           \
      ::commkit::LogMessage(level, __FILE__, __LINE__, ::commkit::StrCat(__VA_ARGS__));         \
  } while (false)
#define COMMKIT_LOG_ERROR(...) COMMKIT_LOG(::commkit::LogLevel::kError, __VA_ARGS__)
#define COMMKIT_LOG_WARN(...) COMMKIT_LOG(::commkit::LogLevel::kWarn, __VA_ARGS__)
#define COMMKIT_LOG_INFO(...) COMMKIT_LOG(::commkit::LogLevel::kInfo, __VA_ARGS__)
#define COMMKIT_LOG_DEBUG(...) COMMKIT_LOG(::commkit::LogLevel::kDebug, __VA_ARGS__)
