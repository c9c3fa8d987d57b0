// The NCCL/CUDA error mapping table: pure functions, no GPU.
#include <gtest/gtest.h>

#include <string>

#include "commkit/comm/nccl/nccl_error.h"

namespace commkit::comm::nccl {
namespace {

struct Row {
  int result;
  NcclPhase phase;
  const char* last_error;
  StatusCode code;
  NcclRecovery recovery;
  const char* must_contain;  // part of the hint
};

TEST(NcclErrorTest, MappingTable) {
  const Row rows[] = {
      {kNcclSystemError, NcclPhase::kInit, "", StatusCode::kBackendError,
       NcclRecovery::kAbortCommunicator, "NCCL_SOCKET_IFNAME"},
      {kNcclInternalError, NcclPhase::kInit, "", StatusCode::kBackendError,
       NcclRecovery::kAbortCommunicator, "gpudoctor"},
      {kNcclInternalError, NcclPhase::kSplit, "", StatusCode::kBackendError,
       NcclRecovery::kAbortCommunicator, "NCCL_SOCKET_IFNAME"},
      {kNcclUnhandledCudaError, NcclPhase::kEnqueue, "", StatusCode::kBackendError,
       NcclRecovery::kAbortCommunicator, "Xid"},
      {kNcclUnhandledCudaError, NcclPhase::kInit, "Cuda failure 'peer access is not supported between these two devices'",
       StatusCode::kBackendError, NcclRecovery::kAbortCommunicator, "NCCL_P2P_DISABLE=1"},
      {kNcclRemoteError, NcclPhase::kAsync, "", StatusCode::kRemoteError,
       NcclRecovery::kAbortCommunicator, "peer died"},
      {kNcclInvalidArgument, NcclPhase::kEnqueue, "invalid root", StatusCode::kInvalidArgument,
       NcclRecovery::kCommunicatorUsable, "still usable"},
      {kNcclInvalidUsage, NcclPhase::kEnqueue, "", StatusCode::kInvalidArgument,
       NcclRecovery::kAbortCommunicator, "mismatched"},
      {kNcclTimeout, NcclPhase::kAsync, "", StatusCode::kTimeout, NcclRecovery::kAbortCommunicator,
       "stuck"},
      {kNcclSystemError, NcclPhase::kInit, "Bootstrap : no socket interface found",
       StatusCode::kBackendError, NcclRecovery::kAbortCommunicator, "NCCL_SOCKET_IFNAME"},
      {kNcclSystemError, NcclPhase::kAsync, "NET/IB : Got completion with error", StatusCode::kBackendError,
       NcclRecovery::kAbortCommunicator, "NCCL_IB_HCA"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(NcclResultName(row.result) + " / " + std::string(ToString(row.phase)));
    Status s = MapNcclResult(row.result, row.phase, "group 'world' rank 0/1", row.last_error);
    EXPECT_EQ(s.code(), row.code) << s.ToString();
    EXPECT_EQ(NcclRecoveryFor(row.result), row.recovery);
    EXPECT_NE(s.message().find("group 'world' rank 0/1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(NcclResultName(row.result)), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(row.must_contain), std::string::npos) << s.message();
    if (*row.last_error != '\0') {
      EXPECT_NE(s.message().find(row.last_error), std::string::npos) << s.message();
    }
  }
}

TEST(NcclErrorTest, SuccessIsOkAndInProgressIsNeverAnError) {
  EXPECT_TRUE(MapNcclResult(kNcclSuccess, NcclPhase::kInit, "x", "").ok());
  Status s = MapNcclResult(kNcclInProgress, NcclPhase::kInit, "x", "");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(NcclRecoveryFor(kNcclInProgress), NcclRecovery::kNone);
}

TEST(NcclErrorTest, UnknownCodesAreNamedAndFatal) {
  EXPECT_EQ(NcclResultName(42), "ncclResult(42)");
  Status s = MapNcclResult(42, NcclPhase::kEnqueue, "x", "");
  EXPECT_EQ(s.code(), StatusCode::kBackendError);
  EXPECT_EQ(NcclRecoveryFor(42), NcclRecovery::kAbortCommunicator);
}

TEST(NcclErrorTest, CudaDriverAndDeviceErrorsAreUnavailable) {
  Status no_driver = MapCudaError(35, "cudaErrorInsufficientDriver", "driver too old", "probe");
  EXPECT_EQ(no_driver.code(), StatusCode::kUnavailable);
  EXPECT_NE(no_driver.message().find("libcuda"), std::string::npos);
  Status no_device = MapCudaError(100, "cudaErrorNoDevice", "no CUDA-capable device", "probe");
  EXPECT_EQ(no_device.code(), StatusCode::kUnavailable);
  EXPECT_NE(no_device.message().find("CUDA_VISIBLE_DEVICES"), std::string::npos);
  EXPECT_EQ(MapCudaError(34, "cudaErrorStubLibrary", "stub", "probe").code(), StatusCode::kUnavailable);
  EXPECT_EQ(MapCudaError(2, "cudaErrorMemoryAllocation", "oom", "probe").code(), StatusCode::kBackendError);
  EXPECT_TRUE(MapCudaError(0, "cudaSuccess", "", "probe").ok());
}

}  // namespace
}  // namespace commkit::comm::nccl
