// ApplyAdvice: the advisor's recommendations turned into environment variables (or log lines) before
// NCCL reads its environment at its first communicator. A variable the user set is never touched.
#include <cstdlib>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "commkit/topology/advisor.h"

namespace commkit::topology {

std::string_view ToString(AdviceMode mode) {
  switch (mode) {
    case AdviceMode::kOff: return "off";
    case AdviceMode::kLog: return "log";
    case AdviceMode::kApply: return "apply";
  }
  return "?";
}

EnvAccess EnvAccess::Process() {
  EnvAccess e;
  e.get = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  e.set = [](const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 0); };
  return e;
}

std::vector<std::string> ApplyAdvice(const Advice& advice, AdviceMode mode, const EnvAccess& env) {
  std::vector<std::string> lines;
  if (mode == AdviceMode::kOff) return lines;
  for (const Recommendation& r : advice.settings) {
    if (r.value.empty() && !r.user_set) continue;
    std::optional<std::string> now = env.get ? env.get(r.variable) : std::nullopt;
    std::string line;
    if (r.user_set || now.has_value()) {
      const std::string& mine = r.user_set ? r.user_value : *now;
      if (r.conflict) {
        line = StrCat(r.variable, "=", mine, " (kept yours; it contradicts this machine: ", r.reason, ")");
      } else if (!r.value.empty() && r.value != mine) {
        line = StrCat(r.variable, "=", mine, " (kept yours; advice was ", r.value, ": ", r.reason, ")");
      } else {
        line = StrCat(r.variable, "=", mine, " (kept yours)");
      }
      if (r.conflict) {
        COMMKIT_LOG_WARN("topology advice: ", line);
      } else {
        COMMKIT_LOG_INFO("topology advice: ", line);
      }
    } else if (mode == AdviceMode::kApply) {
      if (env.set) env.set(r.variable, r.value);
      line = StrCat(r.variable, "=", r.value, " (set: ", r.reason, ")");
      COMMKIT_LOG_INFO("topology advice: ", line);
    } else {
      line = StrCat(r.variable, "=", r.value, " (would set with COMMKIT_NCCL_ADVICE=apply: ", r.reason, ")");
      COMMKIT_LOG_INFO("topology advice: ", line);
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace commkit::topology
