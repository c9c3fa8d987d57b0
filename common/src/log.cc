#include "commkit/common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace commkit {

namespace {

struct LogState {
  std::mutex mu;
  LogSink sink;
  int rank = -1;
  int size = 0;
  std::string host;
};

LogState& State() {
  static LogState* state = [] {
    auto* s = new LogState();  // never destroyed: logging works during static destruction
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) == 0) s->host = buf;
    return s;
  }();
  return *state;
}

std::atomic<int> g_level{-1};

int LevelFromEnvironment() {
  const char* raw = std::getenv("COMMKIT_LOG");
  if (raw == nullptr || *raw == '\0') return static_cast<int>(LogLevel::kWarn);
  std::string value = ToLower(raw);
  if (value == "error") return static_cast<int>(LogLevel::kError);
  if (value == "warn" || value == "warning") return static_cast<int>(LogLevel::kWarn);
  if (value == "info") return static_cast<int>(LogLevel::kInfo);
  if (value == "debug" || value == "trace") return static_cast<int>(LogLevel::kDebug);
  std::fprintf(stderr, "[commkit W] COMMKIT_LOG='%s' is not one of error, warn, info, debug; using warn\n", raw);
  return static_cast<int>(LogLevel::kWarn);
}

const char* Basename(const char* file) {
  const char* slash = nullptr;
  for (const char* p = file; *p; ++p)
    if (*p == '/') slash = p;
  return slash ? slash + 1 : file;
}

}  // namespace

std::string_view ToString(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

LogLevel GetLogLevel() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    int from_env = LevelFromEnvironment();
    int expected = -1;
    g_level.compare_exchange_strong(expected, from_env);
    level = g_level.load();
  }
  return static_cast<LogLevel>(level);
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void SetLogRank(int rank, int size) {
  auto& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rank = rank;
  s.size = size;
}

void SetLogSink(LogSink sink) {
  auto& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

void LogMessage(LogLevel level, const char* file, int line, std::string_view message) {
  static const char kLetters[] = {'E', 'W', 'I', 'D'};
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));

  auto& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string out = StrCat("[commkit ", kLetters[static_cast<int>(level)], " ", stamp, " ", s.host);
  if (s.rank >= 0) out += StrCat(" rank ", s.rank, "/", s.size);
  out += StrCat(" ", Basename(file), ":", line, "] ", message);
  if (s.sink) {
    s.sink(level, out);
    return;
  }
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace commkit
