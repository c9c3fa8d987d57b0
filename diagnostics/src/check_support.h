// Helpers shared by the built-in checks (private to the diagnostics module, not installed).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commkit/diagnostics/check.h"

namespace commkit::diagnostics::internal {

// A check's result: Outcome(CheckStatus::kWarn, "summary", {"evidence"}, "export FIX=1").
inline CheckOutcome Outcome(CheckStatus status, std::string summary, std::vector<std::string> evidence = {},
                            std::string fix = "") {
  return CheckOutcome{status, std::move(summary), std::move(evidence), std::move(fix)};
}

// A named SystemView fact; a failure to produce it becomes the text "error: <message>".
std::string FactOr(const CheckContext& ctx, std::string_view name, const std::function<std::string()>& produce);

// The NCCL_/FI_/CUDA_VISIBLE_DEVICES/LD_LIBRARY_PATH/... environment as the fact "env" (name -> value).
std::map<std::string, std::string> NodeEnv(const CheckContext& ctx);

// GPUs the NVIDIA driver lists in /proc/driver/nvidia/gpus (0 without a driver).
inline int GpuCount(const CheckContext& ctx) {
  auto gpus = ctx.system->ListDir("/proc/driver/nvidia/gpus");
  return gpus.ok() ? static_cast<int>(gpus->size()) : 0;
}

// env.nccl and net.nccl_socket (nccl_env_checks.cc), registered by RegisterNodeChecks.
void RegisterNcclEnvChecks(CheckRegistry& registry);

}  // namespace commkit::diagnostics::internal
