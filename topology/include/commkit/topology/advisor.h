// Advisor: NCCL/libfabric environment settings derived from a probed topology, the interfaces and
// routes, and the current environment. Each recommendation carries a one-line reason. A variable
// the user already set is never overridden: it is reported (and flagged when it contradicts the
// machine, e.g. NCCL_SOCKET_IFNAME=eth0 on a host without eth0). Pure function; thread-safe.
#pragma once

#include <functional>
#include <map>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/topology/probe.h"

namespace commkit::topology {

struct AdvisorOptions {
  std::optional<std::string> master_addr;       // IP literal of MASTER_ADDR / the rendezvous host
  std::map<std::string, std::string> env;       // the user's environment (only NCCL_*/FI_* matter)
  // Snapshot of NCCL_*, FI_*, MASTER_ADDR and CUDA_VISIBLE_DEVICES from this process's environment.
  static AdvisorOptions FromEnvironment();
  // The same from a recorded "env" fact: sorted NAME=value lines, as `gpudoctor snapshot` and
  // `commkit-topo capture` record them, so a replay checks the captured machine's settings.
  static AdvisorOptions FromEnvFact(std::string_view text);
  // This process's "env" fact (what gpudoctor records: NCCL_*, FI_*, TORCH_NCCL_*, UCX_*,
  // CUDA_VISIBLE_DEVICES, MASTER_ADDR, LD_LIBRARY_PATH, VIRTUAL_ENV, CONDA_PREFIX).
  static std::string EnvFact();
};

struct Recommendation {
  std::string variable;
  std::string value;      // recommended value
  std::string reason;     // one line
  bool user_set = false;  // the user already set it: not exported, only reported
  std::string user_value;
  bool conflict = false;  // the user's value contradicts the topology
};

struct Advice {
  std::vector<Recommendation> settings;
  std::vector<std::string> findings;  // conflicts and observations, one line each
  const Recommendation* Find(std::string_view variable) const;
  // "# reason\nexport VAR=value\n" for every recommendation the user has not set.
  std::string ToShell() const;
  // "VAR=value" lines (docker --env-file / systemd EnvironmentFile), comments with reasons.
  std::string ToEnvFile() const;
  // {"settings":[{variable,value,reason,user_set,user_value,conflict}], "findings":[...]}
  std::string ToJson() const;
};

Advice Advise(const ProbeReport& report, const AdvisorOptions& options);

// What to do with advice before NCCL's first communicator (COMMKIT_NCCL_ADVICE): nothing, log each
// recommendation with its reason, or also set it in the process environment.
enum class AdviceMode : std::uint8_t { kOff, kLog, kApply };
std::string_view ToString(AdviceMode mode);

// The process environment as ApplyAdvice sees it; tests pass their own.
struct EnvAccess {
  std::function<std::optional<std::string>(const std::string&)> get;  // nullopt when unset
  std::function<void(const std::string&, const std::string&)> set;
  static EnvAccess Process();  // getenv / setenv(overwrite = 0)
};

// Applies `advice` (kApply) or only describes it (kLog): one line per recommendation that has a
// value, "NCCL_P2P_DISABLE=1 (set: <reason>)", "... (would set: ...)" in kLog, and "... (kept yours:
// NCCL_X=<value>)" for a variable the user set — either in the advice's snapshot or in `env` by now,
// so a user's value is never overwritten. Also logs every line at INFO. kOff: nothing, no lines.
std::vector<std::string> ApplyAdvice(const Advice& advice, AdviceMode mode, const EnvAccess& env = EnvAccess::Process());

}  // namespace commkit::topology
