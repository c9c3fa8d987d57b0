// Pure mapping of NCCL/CUDA codes to typed Status values with operator hints (no NCCL, no CUDA).
#include "commkit/comm/nccl/nccl_error.h"

#include <algorithm>
#include <cctype>

#include "commkit/common/strings.h"

namespace commkit::comm::nccl {
namespace {

bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) ==
                                 std::tolower(static_cast<unsigned char>(b));
                        });
  return it != haystack.end();
}

// CUDA runtime codes that mean "no usable driver or device here".
constexpr int kCudaErrorInitializationError = 3;
constexpr int kCudaErrorStubLibrary = 34;
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorCallRequiresNewerDriver = 36;
constexpr int kCudaErrorDevicesUnavailable = 46;
constexpr int kCudaErrorNoDevice = 100;
constexpr int kCudaErrorSystemNotReady = 802;
constexpr int kCudaErrorSystemDriverMismatch = 803;

}  // namespace

std::string_view ToString(NcclPhase phase) {
  switch (phase) {
    case NcclPhase::kInit: return "communicator init";
    case NcclPhase::kSplit: return "communicator split";
    case NcclPhase::kEnqueue: return "enqueue";
    case NcclPhase::kAsync: return "asynchronous operation";
    case NcclPhase::kAbort: return "abort";
  }
  return "unknown phase";
}

std::string_view ToString(NcclRecovery recovery) {
  switch (recovery) {
    case NcclRecovery::kNone: return "none";
    case NcclRecovery::kCommunicatorUsable: return "communicator still usable";
    case NcclRecovery::kAbortCommunicator: return "communicator must be aborted and recreated";
  }
  return "unknown";
}

std::string NcclResultName(int result) {
  switch (result) {
    case kNcclSuccess: return "ncclSuccess";
    case kNcclUnhandledCudaError: return "ncclUnhandledCudaError";
    case kNcclSystemError: return "ncclSystemError";
    case kNcclInternalError: return "ncclInternalError";
    case kNcclInvalidArgument: return "ncclInvalidArgument";
    case kNcclInvalidUsage: return "ncclInvalidUsage";
    case kNcclRemoteError: return "ncclRemoteError";
    case kNcclInProgress: return "ncclInProgress";
    case kNcclTimeout: return "ncclTimeout";
    default: return StrCat("ncclResult(", result, ")");
  }
}

NcclRecovery NcclRecoveryFor(int result) {
  switch (result) {
    case kNcclSuccess:
    case kNcclInProgress: return NcclRecovery::kNone;
    case kNcclInvalidArgument: return NcclRecovery::kCommunicatorUsable;
    default: return NcclRecovery::kAbortCommunicator;  // CUDA, System, Internal, InvalidUsage, Remote, Timeout
  }
}

std::string NcclHint(int result, NcclPhase phase, std::string_view last_error) {
  // Specific texts first: NCCL's last error names the cause better than the code.
  if (ContainsIgnoreCase(last_error, "peer access is not supported") ||
      ContainsIgnoreCase(last_error, "peer access")) {
    return "GPU peer-to-peer access failed (ACS/IOMMU or virtualisation); try NCCL_P2P_DISABLE=1 and "
           "check ACS/IOMMU settings (iommu=pt) with gpudoctor";
  }
  if (ContainsIgnoreCase(last_error, "no socket interface") ||
      ContainsIgnoreCase(last_error, "bootstrap") || ContainsIgnoreCase(last_error, "socket")) {
    return "NCCL could not connect its bootstrap sockets: set NCCL_SOCKET_IFNAME to an interface "
           "every rank can reach (not lo/docker0) and run gpudoctor";
  }
  if (ContainsIgnoreCase(last_error, "out of memory") || ContainsIgnoreCase(last_error, "cudaMalloc")) {
    return "GPU memory exhausted: free memory before creating communicators or lower NCCL_BUFFSIZE";
  }
  if (ContainsIgnoreCase(last_error, "Duplicate GPU") ||
      ContainsIgnoreCase(last_error, "same device")) {
    return "two ranks use the same GPU: give each rank its own device (set the device before init)";
  }
  if (ContainsIgnoreCase(last_error, "ibv_") || ContainsIgnoreCase(last_error, "NET/IB")) {
    return "InfiniBand/RoCE transport failed: check NCCL_IB_HCA, link state (ibstat) and run gpudoctor";
  }
  switch (result) {
    case kNcclSystemError:
    case kNcclInternalError:
      if (phase == NcclPhase::kInit || phase == NcclPhase::kSplit) {
        return "check the socket interface (NCCL_SOCKET_IFNAME), firewalls between ranks, and run "
               "gpudoctor; rerun with NCCL_DEBUG=INFO for NCCL's own log";
      }
      return "a system call or NCCL transport failed: rerun with NCCL_DEBUG=WARN and run gpudoctor";
    case kNcclUnhandledCudaError:
      return "a CUDA call failed inside NCCL (driver/runtime mismatch, Xid, or a faulty GPU): check "
             "dmesg for Xid errors and run gpudoctor";
    case kNcclRemoteError:
      return "a peer died or its network link failed: check the other ranks' logs (the first rank to "
             "fail names the cause)";
    case kNcclInvalidArgument:
      return "an argument was rejected (null/unregistered buffer, bad count, datatype or root); the "
             "communicator is still usable";
    case kNcclInvalidUsage:
      return "NCCL was used wrongly (mismatched collectives across ranks, wrong device current, or "
             "calls on an aborted communicator)";
    case kNcclTimeout:
      return "NCCL timed out waiting for peers: a rank is stuck or dead";
    default:
      return "";
  }
}

Status MapNcclResult(int result, NcclPhase phase, std::string_view where, std::string_view last_error) {
  if (result == kNcclSuccess) return Status::Ok();
  std::string message = StrCat(where, ": NCCL ", NcclResultName(result), " during ", ToString(phase));
  if (!last_error.empty()) message += StrCat(": ", last_error);
  if (result != kNcclInProgress) message += StrCat(" [", ToString(NcclRecoveryFor(result)), "]");
  std::string hint = NcclHint(result, phase, last_error);
  if (!hint.empty()) message += StrCat(". Hint: ", hint);
  switch (result) {
    case kNcclInvalidArgument:
    case kNcclInvalidUsage: return Status::InvalidArgument(std::move(message));
    case kNcclRemoteError: return Status::RemoteError(std::move(message));
    case kNcclTimeout: return Status::Timeout(std::move(message));
    case kNcclInProgress:
      return Status::Internal(StrCat(message, " (ncclInProgress must be polled, not mapped)"));
    default: return Status::BackendError(std::move(message));
  }
}

Status MapCudaError(int error, std::string_view error_name, std::string_view error_string,
                    std::string_view where) {
  if (error == 0) return Status::Ok();
  std::string detail = StrCat(where, ": CUDA ", error_name, " (", error, "): ", error_string);
  switch (error) {
    case kCudaErrorNoDevice:
      return Status::Unavailable(StrCat(detail, ". No CUDA device is visible: check nvidia-smi and "
                                        "CUDA_VISIBLE_DEVICES"));
    case kCudaErrorInsufficientDriver:
    case kCudaErrorStubLibrary:
    case kCudaErrorInitializationError:
    case kCudaErrorCallRequiresNewerDriver:
    case kCudaErrorSystemDriverMismatch:
    case kCudaErrorSystemNotReady:
      return Status::Unavailable(StrCat(detail, ". No usable NVIDIA driver (libcuda.so.1 missing, a "
                                        "stub, or too old for this CUDA runtime): install or update "
                                        "the driver, then run gpudoctor"));
    case kCudaErrorDevicesUnavailable:
      return Status::Unavailable(StrCat(detail, ". The GPUs are busy or in exclusive-process mode: "
                                        "check nvidia-smi compute mode"));
    default: return Status::BackendError(std::move(detail));
  }
}

}  // namespace commkit::comm::nccl
