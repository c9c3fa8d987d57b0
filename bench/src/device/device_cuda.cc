// Device on the CUDA runtime (statically linked, as the NCCL backend links it).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <thread>

#include "commkit/common/dynamic_library.h"
#include "commkit/common/strings.h"
#include "commkit/bench/device.h"

namespace commkit::bench {
namespace {

using Clock = std::chrono::steady_clock;

Status CudaError(cudaError_t err, std::string_view what, int device) {
  // No driver / no device are "unavailable here", not failures of the benchmark.
  const bool unavailable = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
                           err == cudaErrorInitializationError || err == cudaErrorCallRequiresNewerDriver;
  std::string message = StrCat("commkit-bench: ", what, device >= 0 ? StrCat(" on GPU ", device) : std::string(),
                               ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  return unavailable ? Status::Unavailable(std::move(message)) : Status::BackendError(std::move(message));
}

#define COMMKIT_CUDA_OR_RETURN(call, what)                         \
  do {                                                              \
    if (cudaError_t err_ = (call); err_ != cudaSuccess) {           \
      (void)cudaGetLastError();                                     \
      return CudaError(err_, what, device_);                        \
    }                                                               \
  } while (false)

// Polls `query` (cudaStreamQuery/cudaEventQuery) until it stops saying cudaErrorNotReady, at most
// `timeout`: a collective whose peer never arrives must end in an error, not a hang.
template <typename Query>
Status PollUntilDone(Query query, std::chrono::milliseconds timeout, std::string_view what, int device) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const cudaError_t err = query();
    if (err == cudaSuccess) return Status::Ok();
    if (err != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return CudaError(err, what, device);
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout(StrCat("commkit-bench: ", what, " on GPU ", device, " did not finish within ",
                                    timeout.count(), " ms (a rank that never arrived? see --timeout)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int device) : device_(device) {}
  ~CudaDevice() override {
    (void)cudaSetDevice(device_);
    if (graph_exec_ != nullptr) (void)cudaGraphExecDestroy(graph_exec_);
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
  }

  Status Init() {
    COMMKIT_CUDA_OR_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    COMMKIT_CUDA_OR_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    COMMKIT_CUDA_OR_RETURN(cudaEventCreate(&start_), "cudaEventCreate");
    COMMKIT_CUDA_OR_RETURN(cudaEventCreate(&stop_), "cudaEventCreate");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) name_ = prop.name;
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    driver_ = StrCat(driver / 1000, ".", (driver % 1000) / 10);
    return Status::Ok();
  }

  int index() const override { return device_; }
  std::string Describe() const override { return StrCat("GPU ", device_, " (", name_, "), driver ", driver_); }
  void* stream() const override { return stream_; }

  Result<DeviceMemory> Allocate(std::size_t bytes) override {
    COMMKIT_CUDA_OR_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::SystemError(StrCat("commkit-bench: cudaMalloc of ", bytes, " B on GPU ", device_, ": ",
                                              cudaGetErrorString(err), " (use a smaller -e/--maxbytes)"));
    }
    const int device = device_;
    return DeviceMemory(ptr, [device](void* p) {
      (void)cudaSetDevice(device);
      (void)cudaFree(p);
    });
  }

  Status CopyToDevice(void* device, const void* host, std::size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    COMMKIT_CUDA_OR_RETURN(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpy to the device");
    return Synchronize(std::chrono::minutes(1));
  }

  Status CopyToHost(void* host, const void* device, std::size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    COMMKIT_CUDA_OR_RETURN(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                           "cudaMemcpy to the host");
    return Synchronize(std::chrono::minutes(1));
  }

  Status Synchronize(std::chrono::milliseconds timeout) override {
    return PollUntilDone([this] { return cudaStreamQuery(stream_); }, timeout, "the benchmark stream", device_);
  }

  Status RecordStart() override {
    COMMKIT_CUDA_OR_RETURN(cudaEventRecord(start_, stream_), "cudaEventRecord");
    return Status::Ok();
  }
  Status RecordStop() override {
    COMMKIT_CUDA_OR_RETURN(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    return Status::Ok();
  }
  Result<double> ElapsedSeconds(std::chrono::milliseconds timeout) override {
    COMMKIT_RETURN_IF_ERROR(
        PollUntilDone([this] { return cudaEventQuery(stop_); }, timeout, "the timed iterations", device_));
    float ms = 0;
    COMMKIT_CUDA_OR_RETURN(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(ms) / 1e3;
  }

  Status BeginCapture() override {
    if (graph_exec_ != nullptr) {
      (void)cudaGraphExecDestroy(graph_exec_);
      graph_exec_ = nullptr;
    }
    COMMKIT_CUDA_OR_RETURN(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                           "cudaStreamBeginCapture");
    return Status::Ok();
  }
  Status EndCapture() override {
    cudaGraph_t graph = nullptr;
    COMMKIT_CUDA_OR_RETURN(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    const cudaError_t err = cudaGraphInstantiate(&graph_exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    COMMKIT_CUDA_OR_RETURN(err, "cudaGraphInstantiate");
    return Status::Ok();
  }
  Status LaunchGraph() override {
    if (graph_exec_ == nullptr) return Status::Internal("commkit-bench: LaunchGraph before a capture");
    COMMKIT_CUDA_OR_RETURN(cudaGraphLaunch(graph_exec_, stream_), "cudaGraphLaunch");
    return Status::Ok();
  }

 private:
  int device_;
  std::string name_ = "?";
  std::string driver_ = "?";
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
};

// Device count, or Unavailable with the reason. libcuda is asked for first, as the NCCL backend's
// probe does: the runtime's own message for a missing driver says less.
Result<int> VisibleDevices() {
  auto libcuda = DynamicLibrary::Open({"libcuda.so.1", "libcuda.so"});
  if (!libcuda.ok()) {
    return Status::Unavailable(StrCat("libcuda.so.1 not found (no NVIDIA driver on this machine): ",
                                      libcuda.status().message()));
  }
  libcuda->Leak();  // the runtime keeps using it
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(StrCat("cudaGetDeviceCount: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                      ")"));
  }
  if (count <= 0) {
    return Status::Unavailable("no CUDA device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  return count;
}

}  // namespace

Status Device::Probe() { return VisibleDevices().status(); }

Result<std::unique_ptr<Device>> Device::Open(int local_rank) {
  auto count = VisibleDevices();
  if (!count.ok()) return Status::Unavailable(StrCat("commkit-bench: device memory: ", count.status().message()));
  const int index = (local_rank < 0 ? 0 : local_rank) % *count;
  auto device = std::make_unique<CudaDevice>(index);
  COMMKIT_RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace commkit::bench
