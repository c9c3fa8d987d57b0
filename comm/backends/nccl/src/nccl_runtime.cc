#include "commkit/comm/nccl/nccl_runtime.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "commkit/comm/nccl/nccl_error.h"
#include "commkit/common/dynamic_library.h"
#include "commkit/common/strings.h"

namespace commkit::comm::nccl {

std::string NcclRuntimeInfo::ToString() const {
  return StrCat(device_count, " CUDA device(s), driver ", driver_version / 1000, ".",
                (driver_version % 1000) / 10, ", runtime ", cuda_runtime_version / 1000, ".",
                (cuda_runtime_version % 1000) / 10, ", NCCL ", nccl_version, " (libcuda: ",
                libcuda_path.empty() ? "?" : libcuda_path, ")");
}

Result<NcclRuntimeInfo> ProbeNcclRuntime() {
  NcclRuntimeInfo info;
  // Ask for libcuda first: the CUDA runtime's own error for a missing driver is less explicit.
  auto libcuda = DynamicLibrary::Open({"libcuda.so.1", "libcuda.so"});
  if (!libcuda.ok()) {
    return Status::Unavailable(StrCat("NCCL backend: libcuda.so.1 not found (no NVIDIA driver on this "
                                      "machine): ", libcuda.status().message(),
                                      ". Install the driver or use the gloo/mpi backend"));
  }
  info.libcuda_path = libcuda->path().empty() ? libcuda->name() : libcuda->path();
  libcuda->Leak();  // the CUDA runtime keeps using it; never unload a driver library

  cudaError_t err = cudaDriverGetVersion(&info.driver_version);
  if (err != cudaSuccess) {
    return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err),
                        "NCCL backend: cudaDriverGetVersion");
  }
  cudaRuntimeGetVersion(&info.cuda_runtime_version);
  err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later probes start clean
    return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err),
                        "NCCL backend: cudaGetDeviceCount");
  }
  if (info.device_count <= 0) {
    return Status::Unavailable("NCCL backend: no CUDA device visible (cudaGetDeviceCount = 0); check "
                               "nvidia-smi and CUDA_VISIBLE_DEVICES");
  }
  ncclResult_t nr = ncclGetVersion(&info.nccl_version);
  if (nr != ncclSuccess) {
    return MapNcclResult(nr, NcclPhase::kInit, "NCCL backend: ncclGetVersion", ncclGetLastError(nullptr));
  }
  return info;
}

}  // namespace commkit::comm::nccl
