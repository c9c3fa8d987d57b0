// Mapping of NCCL and CUDA result codes to typed commkit errors with a hint for the operator.
//
// Pure functions (no NCCL, no CUDA, no GPU): they take the raw integer codes so they are unit-tested
// on machines without a driver. The NCCL backend calls them with ncclGetLastError()'s text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit::comm::nccl {

// What the backend was doing when NCCL returned the code: the same code means different things
// (an ncclSystemError during init is usually the socket interface; during a collective, a dead link).
enum class NcclPhase : std::uint8_t {
  kInit,        // ncclCommInitRankConfig and its nonblocking completion
  kSplit,       // ncclCommSplit
  kEnqueue,     // enqueueing a collective / send / recv (incl. ncclGroupEnd)
  kAsync,       // ncclCommGetAsyncError reported by the watchdog
  kAbort,       // ncclCommAbort / destroy
};
std::string_view ToString(NcclPhase phase);

// How the communicator may be used after the error (NCCL user guide, "Fault Tolerance").
enum class NcclRecovery : std::uint8_t {
  kNone,               // success / in progress: nothing to do
  kCommunicatorUsable, // ncclInvalidArgument: the call had no effect, the communicator stays usable
  kAbortCommunicator,  // fatal: abort (every rank) and recreate the communicator
};
std::string_view ToString(NcclRecovery recovery);

// Numeric NCCL result codes (mirrors ncclResult_t; 8 is ncclTimeout in NCCL releases that have it).
inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclUnhandledCudaError = 1;
inline constexpr int kNcclSystemError = 2;
inline constexpr int kNcclInternalError = 3;
inline constexpr int kNcclInvalidArgument = 4;
inline constexpr int kNcclInvalidUsage = 5;
inline constexpr int kNcclRemoteError = 6;
inline constexpr int kNcclInProgress = 7;
inline constexpr int kNcclTimeout = 8;

// "ncclSystemError" etc.; "ncclResult(<n>)" for unknown codes.
std::string NcclResultName(int result);

// The recovery the NCCL documentation prescribes for `result`.
NcclRecovery NcclRecoveryFor(int result);

// A hint for the operator: what to check or set. Empty when there is nothing useful to say.
// Looks at the result, the phase and NCCL's last-error text (e.g. "peer access is not supported").
std::string NcclHint(int result, NcclPhase phase, std::string_view last_error);

// The typed Status for an NCCL result: OK for ncclSuccess; kUnavailable is never returned here.
//   InvalidArgument -> kInvalidArgument, InvalidUsage -> kInvalidArgument (fatal: see recovery),
//   RemoteError -> kRemoteError, Timeout -> kTimeout, UnhandledCuda/System/Internal -> kBackendError,
//   InProgress -> kInternal (callers must poll, never map it).
// Message: "<where>: NCCL <name> during <phase>: <last_error> [recovery]. Hint: <hint>".
Status MapNcclResult(int result, NcclPhase phase, std::string_view where, std::string_view last_error);

// CUDA runtime errors (cudaError_t as int with cudaGetErrorName/String text) at backend creation:
// no driver / no device become kUnavailable with the reason; others kBackendError.
Status MapCudaError(int error, std::string_view error_name, std::string_view error_string,
                    std::string_view where);

}  // namespace commkit::comm::nccl
