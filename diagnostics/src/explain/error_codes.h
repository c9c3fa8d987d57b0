// Error codes a log line carries, and what they mean for the cause families: CUDA runtime / driver
// codes (by number — "Cuda failure 2", "code=802", "(0 vs. 35)" — and by name — cudaErrorNoDevice,
// CUDA_ERROR_SYSTEM_NOT_READY), and POSIX errnos (by number — "errno: 113", "[Errno 28]",
// "fi_getinfo: -61" — as well as by their strerror text). The code -> family tables are ours, from the
// CUDA runtime API reference and errno(3); the code names and strings come from the message catalog
// (the CUDA runtime's own cudaGetErrorString table), so a line that prints only the string still
// yields its code.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace commkit::diagnostics::explain {

// What one CUDA error code says about the cause. `family` is empty for codes that prove nothing on
// their own (cudaErrorInvalidValue, cudaErrorUnknown): their meaning depends on where they happen.
struct CudaCodeMeaning {
  int code;
  const char* name;    // cudaError_t name
  const char* family;  // cause family id, or ""
  int score;
  bool provable;       // the code alone names the cause
  const char* cause;
};

// nullptr when the code has no entry.
const CudaCodeMeaning* CudaCode(int code);

// CUDA error codes in a lower-cased line: numbers printed next to a CUDA context ("cuda failure 2",
// "cuda error 700", "cuda runtime error (100)", "code=802(", "(0 vs. 35)", "cudaerror 46",
// "failed with 34" after a cu*/cuda* call) and names (cudaerrornodevice, cuda_error_no_device).
// `catalog_code` (>= 0) is the code of a cudaGetErrorString text the catalog matched on this line.
std::vector<int> CudaCodesIn(std::string_view lower, int catalog_code);

// The code behind a cudart catalog entry ("cudaGetErrorString(35) cudaErrorInsufficientDriver"), or -1.
int CudaCodeOfCatalogFiles(std::string_view files);

// POSIX errno numbers printed in a lower-cased line ("errno: 113", "errno 28", "[errno 28]",
// "(errno 12)", "err(-12)", "fi_getinfo: -61", "ret is:-12", "rc: 12", "error: ... (28)" after a
// strerror text) together with those named by their strerror text. Returns symbolic names
// ("ENOSPC", ...), each once.
std::vector<std::string> ErrnosIn(std::string_view lower);

}  // namespace commkit::diagnostics::explain
