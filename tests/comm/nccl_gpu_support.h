// Shared by the NCCL gpu tests: skip (or fail under COMMKIT_REQUIRE_GPU=1) without a usable GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "commkit/comm/nccl/nccl_runtime.h"

namespace commkit::comm::nccl::testing {

// Returns the device count, or 0 after GTEST_SKIP/ADD_FAILURE: callers `return` when 0.
inline int RequireGpu() {
  auto info = ProbeNcclRuntime();
  if (info.ok()) return info->device_count;
  const char* require = std::getenv("COMMKIT_REQUIRE_GPU");
  if (require != nullptr && std::string(require) == "1") {
    ADD_FAILURE() << "COMMKIT_REQUIRE_GPU=1 but: " << info.status().ToString();
  }
  return 0;
}

}  // namespace commkit::comm::nccl::testing

// In a TEST body: skips (with the probe's reason) when no GPU.
#define COMMKIT_REQUIRE_GPU_OR_SKIP(devices)                                                   \
  const int devices = ::commkit::comm::nccl::testing::RequireGpu();                             \
  if (devices == 0) {                                                                           \
    GTEST_SKIP() << "no usable GPU: " << ::commkit::comm::nccl::ProbeNcclRuntime().status().ToString(); \
  }
