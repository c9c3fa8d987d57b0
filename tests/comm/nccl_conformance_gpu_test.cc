// The process-group conformance suite, unchanged, on the NCCL backend at world size 1 (one GPU: NCCL
// refuses several ranks on one device; multi-rank runs need several GPUs). The suite fills and reads
// its buffers on the host, so they must be host-accessible device memory:
//   - CUDA managed memory where the device allows the CPU to touch it while kernels run
//     (cudaDevAttrConcurrentManagedAccess); without that attribute (virtualized GPUs) the CPU sees the
//     device's writes only after a full synchronisation and faults while any kernel runs;
//   - elsewhere pinned host memory mapped into the device's address space, which NCCL reads and
//     writes through unified addressing and the host sees once the work's completion event fired.
// COMMKIT_TEST_BUFFERS=managed|pinned picks one. Skipped with the backend's reason without a GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commkit/comm/nccl/nccl_backend.h"
#include "commkit/comm/registry.h"
#include "pg_conformance.h"

namespace commkit::testing {
namespace {

void* AllocateManaged(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMallocManaged(&p, bytes) != cudaSuccess) return nullptr;
  std::memset(p, 0, bytes);
  return p;
}
void ReleaseManaged(void* p) { cudaFree(p); }

void* AllocatePinned(std::size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) return nullptr;
  std::memset(p, 0, bytes);
  return p;
}
void ReleasePinned(void* p) { cudaFreeHost(p); }

bool UseManaged() {
  const char* env = std::getenv("COMMKIT_TEST_BUFFERS");
  if (env != nullptr && std::string(env) == "managed") return true;
  if (env != nullptr && std::string(env) == "pinned") return false;
  int device = 0;
  int concurrent = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return concurrent != 0;
}

class ManagedBuffers : public ::testing::Environment {
 public:
  void SetUp() override {
    // Registering explicitly also keeps libcommkit_comm_nccl linked (--as-needed).
    Registry::Default().Register(comm::nccl::NcclBackendInfo());
    bool managed = UseManaged();
    std::fprintf(stderr, "nccl conformance: buffers are %s\n",
                 managed ? "CUDA managed memory" : "mapped pinned host memory");
    TestBufferAllocator() = managed ? BufferAllocator{&AllocateManaged, &ReleaseManaged}
                                    : BufferAllocator{&AllocatePinned, &ReleasePinned};
  }
};
[[maybe_unused]] ::testing::Environment* const kManaged = ::testing::AddGlobalTestEnvironment(new ManagedBuffers);

INSTANTIATE_TEST_SUITE_P(Nccl, PgConformance, ::testing::Combine(::testing::Values("nccl"), ::testing::Values(1)),
                         PgParamName);

}  // namespace
}  // namespace commkit::testing
