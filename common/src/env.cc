#include "commkit/common/env.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

struct EnvCache {
  std::mutex mu;
  std::map<std::string, std::optional<std::string>, std::less<>> values;
};

EnvCache& Cache() {
  static EnvCache* cache = new EnvCache();
  return *cache;
}

std::string Quote(std::string_view name, std::string_view value) { return StrCat(name, "='", value, "'"); }

}  // namespace

std::optional<std::string> EnvRaw(std::string_view name) {
  auto& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.values.find(name);
  if (it != cache.values.end()) return it->second;
  std::string key(name);
  const char* raw = std::getenv(key.c_str());
  std::optional<std::string> value;
  if (raw != nullptr) value = std::string(raw);
  cache.values.emplace(key, value);
  if (value) COMMKIT_LOG_INFO(key, " set by environment to '", *value, "'");
  return value;
}

Result<std::optional<std::string>> EnvString(std::string_view name) { return EnvRaw(name); }

Result<std::optional<std::int64_t>> EnvInt(std::string_view name, std::int64_t min, std::int64_t max) {
  auto raw = EnvRaw(name);
  if (!raw) return std::optional<std::int64_t>();
  auto value = ParseInt(*raw);
  if (!value) return Status::InvalidArgument(StrCat(Quote(name, *raw), " is not an integer"));
  if (*value < min || *value > max)
    return Status::InvalidArgument(StrCat(Quote(name, *raw), " is out of range [", min, ", ", max, "]"));
  return std::optional<std::int64_t>(*value);
}

Result<std::optional<bool>> EnvBool(std::string_view name) {
  auto raw = EnvRaw(name);
  if (!raw) return std::optional<bool>();
  std::string v = ToLower(Trim(*raw));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return std::optional<bool>(true);
  if (v == "0" || v == "false" || v == "no" || v == "off") return std::optional<bool>(false);
  return Status::InvalidArgument(StrCat(Quote(name, *raw), " is not a boolean (use 1/0, true/false, yes/no, on/off)"));
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  std::string_view t = Trim(text);
  std::size_t unit_pos = t.find_first_not_of("0123456789.");
  std::string_view number = t.substr(0, unit_pos);
  std::string unit = unit_pos == std::string_view::npos ? "s" : ToLower(Trim(t.substr(unit_pos)));
  auto value = ParseDouble(number);
  if (!value || *value < 0)
    return Status::InvalidArgument(StrCat("'", text, "' is not a duration (examples: 30, 30s, 500ms, 2m)"));
  double ms = 0;
  if (unit == "us") ms = *value / 1000.0;
  else if (unit == "ms") ms = *value;
  else if (unit == "s" || unit == "sec") ms = *value * 1000.0;
  else if (unit == "m" || unit == "min") ms = *value * 60'000.0;
  else if (unit == "h") ms = *value * 3'600'000.0;
  else return Status::InvalidArgument(StrCat("'", text, "' has unknown unit '", unit, "' (use us, ms, s, m or h)"));
  if (ms > 1e15) return Status::InvalidArgument(StrCat("'", text, "' is too long a duration"));
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms + 0.5));
}

Result<std::optional<std::chrono::milliseconds>> EnvDuration(std::string_view name) {
  auto raw = EnvRaw(name);
  if (!raw) return std::optional<std::chrono::milliseconds>();
  auto value = ParseDuration(*raw);
  if (!value.ok()) return value.status().WithContext(name);
  return std::optional<std::chrono::milliseconds>(*value);
}

Result<std::optional<std::string>> EnvChoice(std::string_view name, std::initializer_list<std::string_view> choices) {
  auto raw = EnvRaw(name);
  if (!raw) return std::optional<std::string>();
  std::string lowered = ToLower(Trim(*raw));
  std::vector<std::string> names;
  for (auto choice : choices) {
    if (ToLower(choice) == lowered) return std::optional<std::string>(std::string(choice));
    names.emplace_back(choice);
  }
  return Status::InvalidArgument(StrCat(Quote(name, *raw), " is not one of: ", Join(names, ", ")));
}

Result<std::int64_t> EnvIntOr(std::string_view name, std::int64_t fallback, std::int64_t min, std::int64_t max) {
  COMMKIT_ASSIGN_OR_RETURN(auto value, EnvInt(name, min, max));
  return value.value_or(fallback);
}

Result<bool> EnvBoolOr(std::string_view name, bool fallback) {
  COMMKIT_ASSIGN_OR_RETURN(auto value, EnvBool(name));
  return value.value_or(fallback);
}

Result<std::chrono::milliseconds> EnvDurationOr(std::string_view name, std::chrono::milliseconds fallback) {
  COMMKIT_ASSIGN_OR_RETURN(auto value, EnvDuration(name));
  return value.value_or(fallback);
}

void ResetEnvCacheForTesting() {
  auto& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.values.clear();
}

}  // namespace commkit
