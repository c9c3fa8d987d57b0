// On a machine without a driver or GPU (the CI here), the NCCL backend reports Unavailable with the
// reason and never crashes. On a GPU machine the probe succeeds and these tests check its answer.
#include <gtest/gtest.h>

#include <string>

#include "commkit/comm/nccl/nccl_runtime.h"

namespace commkit::comm::nccl {
namespace {

TEST(NcclUnavailableTest, ProbeReturnsInfoOrUnavailableWithReason) {
  auto info = ProbeNcclRuntime();
  if (info.ok()) {
    EXPECT_GT(info->device_count, 0);
    EXPECT_GT(info->nccl_version, 0);
    EXPECT_GT(info->driver_version, 0);
    EXPECT_FALSE(info->ToString().empty());
    return;
  }
  EXPECT_EQ(info.status().code(), StatusCode::kUnavailable) << info.status().ToString();
  const std::string& m = info.status().message();
  bool names_reason = m.find("libcuda") != std::string::npos ||
                      m.find("no CUDA device") != std::string::npos ||
                      m.find("CUDA_VISIBLE_DEVICES") != std::string::npos;
  EXPECT_TRUE(names_reason) << m;
}

TEST(NcclUnavailableTest, ProbeIsRepeatable) {
  auto a = ProbeNcclRuntime();
  auto b = ProbeNcclRuntime();
  EXPECT_EQ(a.ok(), b.ok());
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), b.status().code());
  }
}

}  // namespace
}  // namespace commkit::comm::nccl
