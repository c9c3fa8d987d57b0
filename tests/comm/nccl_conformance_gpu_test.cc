// The process-group conformance suite, unchanged, on the NCCL backend at world size 1 (one GPU: NCCL
// refuses several ranks on one device; multi-rank runs need several GPUs). Buffers are CUDA managed
// memory, which the backend uses as device memory and the suite reads on the host after
// Work::Synchronize(). Skipped with the backend's reason where there is no usable GPU.
#include <cuda_runtime.h>

#include <cstring>

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

class ManagedBuffers : public ::testing::Environment {
 public:
  void SetUp() override {
    // Registering explicitly also keeps libcommkit_comm_nccl linked (--as-needed).
    Registry::Default().Register(comm::nccl::NcclBackendInfo());
    TestBufferAllocator() = BufferAllocator{&AllocateManaged, &ReleaseManaged};
  }
};
[[maybe_unused]] ::testing::Environment* const kManaged = ::testing::AddGlobalTestEnvironment(new ManagedBuffers);

INSTANTIATE_TEST_SUITE_P(Nccl, PgConformance, ::testing::Combine(::testing::Values("nccl"), ::testing::Values(1)),
                         PgParamName);

}  // namespace
}  // namespace commkit::testing
