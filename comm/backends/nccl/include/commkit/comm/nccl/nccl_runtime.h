// Whether this process can use NCCL at all: libcuda present, a CUDA device visible, NCCL loaded.
// Safe on machines without a driver or GPU (the CUDA runtime is linked statically and loads libcuda
// itself): the answer is then Unavailable with the reason, never a crash.
#pragma once

#include <string>

#include "commkit/common/status.h"

namespace commkit::comm::nccl {

struct NcclRuntimeInfo {
  int device_count = 0;
  int driver_version = 0;        // cudaDriverGetVersion, e.g. 13000
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion of the statically linked runtime
  int nccl_version = 0;          // ncclGetVersion, e.g. 22807
  std::string libcuda_path;      // the libcuda that loaded
  std::string ToString() const;
};

// Probes once per call (cheap after the first: the CUDA runtime caches its init result).
// Unavailable: "libcuda.so.1 not found (no NVIDIA driver) ..." or "no CUDA device visible ...".
Result<NcclRuntimeInfo> ProbeNcclRuntime();

}  // namespace commkit::comm::nccl
