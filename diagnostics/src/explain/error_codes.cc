#include "error_codes.h"

#include <algorithm>
#include <cctype>

namespace commkit::diagnostics::explain {

namespace {

// CUDA runtime codes -> cause family, from the CUDA runtime API reference (cudaError_t) and the
// CUDA compatibility guide. Codes that only say "this call failed" map to no family.
constexpr CudaCodeMeaning kCudaCodes[] = {
    {1, "cudaerrorinvalidvalue", "", 0, false, ""},
    {2, "cudaerrormemoryallocation", "cuda.oom", 76, false,
     "A CUDA allocation failed with cudaErrorMemoryAllocation (2): the GPU ran out of memory"},
    {3, "cudaerrorinitializationerror", "cuda.no_device", 55, false,
     "CUDA failed to initialize (cudaErrorInitializationError 3): driver not loaded or the GPU is not usable here"},
    {34, "cudaerrorstublibrary", "cuda.no_device", 70, false,
     "libcuda is the stub library (cudaErrorStubLibrary 34): the real driver is not installed or not mounted into "
     "the container"},
    {35, "cudaerrorinsufficientdriver", "cuda.driver_too_old", 95, true,
     "The CUDA driver is older than the CUDA runtime (cudaErrorInsufficientDriver 35)"},
    {36, "cudaerrorcallrequiresnewerdriver", "cuda.driver_too_old", 58, false,
     "The installed driver lacks an API this build calls (cudaErrorCallRequiresNewerDriver 36)"},
    {46, "cudaerrordevicesunavailable", "gpu.duplicate", 66, false,
     "The GPU is held by another process (cudaErrorDevicesUnavailable 46, exclusive-process compute mode): "
     "usually a second rank on the same GPU (LOCAL_RANK not used for the device), or a process left from an "
     "earlier run (nvidia-smi lists it)"},
    {100, "cudaerrornodevice", "cuda.no_device", 90, true,
     "CUDA sees no device (cudaErrorNoDevice 100)"},
    {101, "cudaerrorinvaliddevice", "cuda.no_device", 90, true,
     "A device index beyond the visible GPUs (cudaErrorInvalidDevice 101): more ranks per node than GPUs, or "
     "CUDA_VISIBLE_DEVICES narrower than LOCAL_RANK"},
    {98, "cudaerrorinvaliddevicefunction", "nccl.bug", 45, false,
     "No device function for this GPU (cudaErrorInvalidDeviceFunction 98): the library was not built for this GPU "
     "architecture (a newer release supports it)"},
    {209, "cudaerrornokernelimagefordevice", "nccl.bug", 50, false,
     "No kernel image for this GPU (cudaErrorNoKernelImageForDevice 209): the library was not built for this GPU "
     "architecture (a newer release supports it)"},
    {214, "cudaerroreccuncorrectable", "cuda.illegal_access", 62, false,
     "Uncorrectable ECC error (cudaErrorECCUncorrectable 214): a GPU hardware fault"},
    {217, "cudaerrorpeeraccessunsupported", "p2p.unsupported", 68, false,
     "CUDA peer access is not supported between these GPUs (cudaErrorPeerAccessUnsupported 217)"},
    {220, "cudaerrornvlinkuncorrectable", "cuda.illegal_access", 62, false,
     "Uncorrectable NVLink error (cudaErrorNvlinkUncorrectable 220): a link / hardware fault"},
    {222, "cudaerrorunsupportedptxversion", "cuda.driver_too_old", 70, false,
     "PTX from a newer toolchain than the driver supports (cudaErrorUnsupportedPtxVersion 222)"},
    {226, "cudaerrorcontained", "cuda.illegal_access", 62, false,
     "Invalid access of peer GPU memory over NVLink or a hardware error (cudaErrorContained 226)"},
    {700, "cudaerrorillegaladdress", "cuda.illegal_access", 74, false,
     "A kernel made an illegal memory access (cudaErrorIllegalAddress 700)"},
    {714, "cudaerrorhardwarestackerror", "cuda.illegal_access", 62, false, "A kernel faulted (hardware stack error 714)"},
    {715, "cudaerrorillegalinstruction", "cuda.illegal_access", 62, false,
     "A kernel faulted (illegal instruction 715)"},
    {716, "cudaerrormisalignedaddress", "cuda.illegal_access", 62, false, "A kernel faulted (misaligned address 716)"},
    {719, "cudaerrorlaunchfailure", "cuda.illegal_access", 62, false,
     "A kernel faulted (cudaErrorLaunchFailure 719, unspecified launch failure)"},
    {710, "cudaerrorassert", "cuda.illegal_access", 60, false,
     "A device-side assert fired in a kernel (cudaErrorAssert 710): an out-of-range index or bad input in the "
     "program's own kernels, which the next CUDA call (often NCCL's) reports"},
    {718, "cudaerrorinvalidpc", "cuda.illegal_access", 62, false, "A kernel faulted (invalid program counter 718)"},
    {216, "cudaerrordevicealreadyinuse", "gpu.duplicate", 60, false,
     "The GPU is in an exclusive compute mode and already used by another thread or process "
     "(cudaErrorDeviceAlreadyInUse 216): two ranks on one GPU, or another job on it"},
    {705, "cudaerrorpeeraccessnotenabled", "p2p.unsupported", 42, false,
     "CUDA peer access between these GPUs was not enabled (cudaErrorPeerAccessNotEnabled 705)"},
    {711, "cudaerrortoomanypeers", "p2p.unsupported", 45, false,
     "Peer mapping resources exhausted (cudaErrorTooManyPeers 711): more peers than the GPU can map"},
    {802, "cudaerrorsystemnotready", "cuda.system_not_ready", 75, false,
     "CUDA reports the system is not ready (cudaErrorSystemNotReady 802): on NVSwitch systems nvidia-fabricmanager "
     "is not running"},
    {803, "cudaerrorsystemdrivermismatch", "driver.mismatch", 86, true,
     "The kernel driver and the CUDA driver library (libcuda) are different versions "
     "(cudaErrorSystemDriverMismatch 803)"},
    {804, "cudaerrorcompatnotsupportedondevice", "cuda.driver_too_old", 70, false,
     "Forward compatibility is not supported on this GPU (cudaErrorCompatNotSupportedOnDevice 804): the driver is "
     "older than the CUDA the code was built for"},
    {999, "cudaerrorunknown", "", 0, false, ""},
};

// CUDA driver API names (CUresult) for the same codes.
struct DriverName {
  const char* name;
  int code;
};
constexpr DriverName kDriverNames[] = {
    {"cuda_error_invalid_value", 1},        {"cuda_error_out_of_memory", 2},
    {"cuda_error_not_initialized", 3},      {"cuda_error_stub_library", 34},
    {"cuda_error_no_device", 100},          {"cuda_error_invalid_device", 101},
    {"cuda_error_no_binary_for_gpu", 209},  {"cuda_error_ecc_uncorrectable", 214},
    {"cuda_error_peer_access_unsupported", 217},
    {"cuda_error_nvlink_uncorrectable", 220},
    {"cuda_error_unsupported_ptx_version", 222},
    {"cuda_error_illegal_address", 700},    {"cuda_error_launch_failed", 719},
    {"cuda_error_system_not_ready", 802},   {"cuda_error_system_driver_mismatch", 803},
    {"cuda_error_compat_not_supported_on_device", 804},
};

struct ErrnoText {
  const char* text;
  const char* name;
  int number;
};
constexpr ErrnoText kErrnos[] = {
    {"no space left on device", "ENOSPC", 28},     {"cannot allocate memory", "ENOMEM", 12},
    {"connection refused", "ECONNREFUSED", 111},   {"connection timed out", "ETIMEDOUT", 110},
    {"no route to host", "EHOSTUNREACH", 113},     {"network is unreachable", "ENETUNREACH", 101},
    {"address already in use", "EADDRINUSE", 98},  {"connection reset by peer", "ECONNRESET", 104},
    {"software caused connection abort", "ECONNABORTED", 103},
    {"no such file or directory", "ENOENT", 2},    {"no such device", "ENODEV", 19},
    {"operation not permitted", "EPERM", 1},       {"permission denied", "EACCES", 13},
    {"broken pipe", "EPIPE", 32},                  {"bad address", "EFAULT", 14},
    {"resource temporarily unavailable", "EAGAIN", 11}, {"too many open files", "EMFILE", 24},
    {"cannot assign requested address", "EADDRNOTAVAIL", 99},
    {"address family not supported", "EAFNOSUPPORT", 97},
    {"no data available", "ENODATA", 61},
    {nullptr, "EINVAL", 22},  // by number only: CUDA prints "invalid argument" for cudaErrorInvalidValue
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The unsigned number at s[pos...] (at most 6 digits), or -1.
int NumberAt(std::string_view s, std::size_t pos) {
  int v = -1;
  for (std::size_t i = pos; i < s.size() && i < pos + 6 && IsDigit(s[i]); ++i) v = (v < 0 ? 0 : v * 10) + (s[i] - '0');
  if (pos + 6 < s.size() && v >= 0 && IsDigit(s[pos + 6])) return -1;  // longer numbers are not codes
  return v;
}

void AddCode(std::vector<int>& v, int code) {
  if (code >= 0 && std::find(v.begin(), v.end(), code) == v.end()) v.push_back(code);
}

// Numbers following each occurrence of `key`, after optional blanks / '(' / '-'.
template <typename F>
void NumbersAfter(std::string_view s, std::string_view key, F&& add) {
  for (std::size_t at = s.find(key); at != std::string_view::npos; at = s.find(key, at + 1)) {
    // A key that starts a word must not be the tail of another ("src:" is not "rc:").
    if (at > 0 && std::isalpha(static_cast<unsigned char>(key.front())) && std::isalpha(static_cast<unsigned char>(s[at - 1])))
      continue;
    std::size_t p = at + key.size();
    while (p < s.size() && (s[p] == ' ' || s[p] == '(' || s[p] == '-' || s[p] == ':')) ++p;
    add(NumberAt(s, p));
  }
}

}  // namespace

const CudaCodeMeaning* CudaCode(int code) {
  for (const CudaCodeMeaning& m : kCudaCodes)
    if (m.code == code) return &m;
  return nullptr;
}

int CudaCodeOfCatalogFiles(std::string_view files) {
  constexpr std::string_view kKey = "cudaGetErrorString(";
  std::size_t at = files.find(kKey);
  if (at == std::string_view::npos) return -1;
  return NumberAt(files, at + kKey.size());
}

std::vector<int> CudaCodesIn(std::string_view l, int catalog_code) {
  std::vector<int> codes;
  AddCode(codes, catalog_code);
  // Names: cudaErrorXxx (runtime) and CUDA_ERROR_XXX (driver).
  for (std::size_t at = l.find("cudaerror"); at != std::string_view::npos; at = l.find("cudaerror", at + 1)) {
    std::size_t end = at;
    while (end < l.size() && std::isalpha(static_cast<unsigned char>(l[end]))) ++end;
    std::string_view name = l.substr(at, end - at);
    for (const CudaCodeMeaning& m : kCudaCodes)
      if (name == m.name) AddCode(codes, m.code);
  }
  for (const DriverName& d : kDriverNames)
    if (l.find(d.name) != std::string_view::npos) AddCode(codes, d.code);
  // Numbers in a CUDA context.
  auto add = [&](int v) { AddCode(codes, v); };
  NumbersAfter(l, "cuda failure", add);              // NCCL: "Cuda failure 2 'out of memory'"
  NumbersAfter(l, "cuda error", add);                // "CUDA error 401 '...'", "CUDA error: ..." gives none
  NumbersAfter(l, "cuda runtime error", add);        // THC: "cuda runtime error (802) : ..."
  NumbersAfter(l, "cuda failure:", add);
  bool cuda_line = l.find("cuda") != std::string_view::npos;
  if (cuda_line) {
    NumbersAfter(l, "code=", add);                   // cuda-samples: "code=802(cudaErrorSystemNotReady)"
    NumbersAfter(l, " vs. ", add);                   // glog CHECK: "cudaSuccess == cudaStat (0 vs. 35)"
    NumbersAfter(l, "cuda failure: ", add);
  }
  // Driver calls: "cuDriverGetVersion failed with 34", "cuMemCreate failed with error 2".
  for (std::size_t at = l.find(" failed with "); at != std::string_view::npos; at = l.find(" failed with ", at + 1)) {
    std::size_t start = l.rfind(' ', at == 0 ? 0 : at - 1);
    std::string_view call = l.substr(start == std::string_view::npos ? 0 : start + 1, at - (start == std::string_view::npos ? 0 : start + 1));
    if (call.rfind("cu", 0) != 0 || call.rfind("cuda_", 0) == 0) continue;
    std::size_t p = at + 13;
    if (l.compare(p, 6, "error ") == 0) p += 6;
    add(NumberAt(l, p));
  }
  codes.erase(std::remove(codes.begin(), codes.end(), 0), codes.end());  // 0 is cudaSuccess
  return codes;
}

std::vector<std::string> ErrnosIn(std::string_view l) {
  std::vector<std::string> out;
  auto add_name = [&](const char* name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
  };
  auto add_number = [&](int n) {
    for (const ErrnoText& e : kErrnos)
      if (e.number == n) add_name(e.name);
  };
  for (const ErrnoText& e : kErrnos)
    if (e.text != nullptr && l.find(e.text) != std::string_view::npos) add_name(e.name);
  NumbersAfter(l, "errno", add_number);        // "errno: 113 - No route to host", "errno 28", "[errno 28]"
  NumbersAfter(l, "err(", add_number);         // mlx5: "err(-12)"
  NumbersAfter(l, "fi_getinfo:", add_number);  // libfabric: "fi_getinfo: -61 (No data available)"
  NumbersAfter(l, "ret is:", add_number);
  NumbersAfter(l, "rc:", add_number);          // aws-ofi-nccl: "RC: 12, Error: Cannot allocate memory"
  return out;
}

}  // namespace commkit::diagnostics::explain
