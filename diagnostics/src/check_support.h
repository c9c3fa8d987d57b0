// Helpers shared by the built-in checks (private to the diagnostics module, not installed).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "commkit/diagnostics/check.h"

namespace commkit::diagnostics::internal {

// A named SystemView fact; a failure to produce it becomes the text "error: <message>".
std::string FactOr(const CheckContext& ctx, std::string_view name, const std::function<std::string()>& produce);

// The NCCL_/FI_/CUDA_VISIBLE_DEVICES/LD_LIBRARY_PATH/... environment as the fact "env" (name -> value).
std::map<std::string, std::string> NodeEnv(const CheckContext& ctx);

}  // namespace commkit::diagnostics::internal
