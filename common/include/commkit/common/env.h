// Typed environment parameters (COMMKIT_*, and the NCCL_/MASTER_/SLURM_ variables we interpret).
//
// Each variable is read from the environment once per process and cached; when it is set, one info
// line says so ("COMMKIT_TIMEOUT set by environment to 30s"). Invalid values are an InvalidArgument
// error naming the variable, its value and what was expected -- never silently replaced by a default.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

// The raw value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> EnvRaw(std::string_view name);

Result<std::optional<std::string>> EnvString(std::string_view name);
Result<std::optional<std::int64_t>> EnvInt(std::string_view name,
                                          std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                                          std::int64_t max = std::numeric_limits<std::int64_t>::max());
// 1/0, true/false, yes/no, on/off (any case).
Result<std::optional<bool>> EnvBool(std::string_view name);
// "30" (seconds), "30s", "500ms", "2m", "1h", "250us".
Result<std::optional<std::chrono::milliseconds>> EnvDuration(std::string_view name);
// One of `choices` (case-insensitive); returns the choice as spelled in `choices`.
Result<std::optional<std::string>> EnvChoice(std::string_view name, std::initializer_list<std::string_view> choices);

// With a default used only when the variable is unset.
Result<std::int64_t> EnvIntOr(std::string_view name, std::int64_t fallback,
                              std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                              std::int64_t max = std::numeric_limits<std::int64_t>::max());
Result<bool> EnvBoolOr(std::string_view name, bool fallback);
Result<std::chrono::milliseconds> EnvDurationOr(std::string_view name, std::chrono::milliseconds fallback);

// Parses the duration syntax above (shared with command-line flags).
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

// Forget cached values so tests can change the environment.
void ResetEnvCacheForTesting();

}  // namespace commkit
