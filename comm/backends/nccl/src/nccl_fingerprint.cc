#include "nccl_fingerprint.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "commkit/common/strings.h"
#include "nccl_comm.h"

namespace commkit::comm::nccl {

namespace {
constexpr std::size_t kWordsPerSlot = 4;
constexpr std::size_t kSlotBytes = kWordsPerSlot * sizeof(std::uint64_t);
}  // namespace

std::uint64_t FingerprintWord(std::uint64_t fingerprint) {
  return (fingerprint & ~std::uint64_t{1}) | (std::uint64_t{1} << 63);
}

FingerprintVerdict JudgeFingerprint(std::uint64_t max_word, std::uint64_t max_complement) {
  if (max_word == 0 || max_complement == 0) return FingerprintVerdict::kPending;
  return max_word == ~max_complement ? FingerprintVerdict::kAgree : FingerprintVerdict::kDiffer;
}

FingerprintCheck::FingerprintCheck(std::shared_ptr<FingerprintSlots> pool, std::size_t index, std::uint64_t* host,
                                   char* device)
    : pool_(std::move(pool)), index_(index), host_(host), device_(device) {}

FingerprintCheck::~FingerprintCheck() { pool_->Release(index_); }

NcclCall FingerprintCheck::Call() const {
  const void* input = device_;
  void* result = device_ + 2 * sizeof(std::uint64_t);
  return [input, result](ncclComm_t c, cudaStream_t s) {
    return static_cast<int>(ncclAllReduce(input, result, 2, ncclUint64, ncclMax, c, s));
  };
}

FingerprintVerdict FingerprintCheck::Verdict() const {
  // The device writes these words while the host may read them: atomic loads, never torn.
  return JudgeFingerprint(__atomic_load_n(&host_[2], __ATOMIC_ACQUIRE), __atomic_load_n(&host_[3], __ATOMIC_ACQUIRE));
}

FingerprintSlots::~FingerprintSlots() {
  for (const Chunk& c : chunks_) cudaFreeHost(c.host);
}

std::size_t FingerprintSlots::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunks_.size() * kSlotsPerChunk;
}

Result<std::shared_ptr<FingerprintCheck>> FingerprintSlots::Acquire(std::uint64_t fingerprint) {
  std::size_t index;
  Chunk chunk;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      const std::string where = StrCat("NCCL backend on cuda:", device_, ": mapped pinned memory for the "
                                       "fingerprint check (", kSlotsPerChunk * kSlotBytes, " bytes); set "
                                       "COMMKIT_CHECK_MISMATCH=0 to run without the check");
      DeviceGuard guard(device_);
      COMMKIT_RETURN_IF_ERROR(guard.status().WithContext(where));
      void* host = nullptr;
      cudaError_t err = cudaHostAlloc(&host, kSlotsPerChunk * kSlotBytes, cudaHostAllocMapped | cudaHostAllocPortable);
      void* device = nullptr;
      if (err == cudaSuccess) {
        err = cudaHostGetDevicePointer(&device, host, 0);
        if (err != cudaSuccess) cudaFreeHost(host);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err), where);
      }
      const std::size_t base = chunks_.size() * kSlotsPerChunk;
      chunks_.push_back({static_cast<std::uint64_t*>(host), static_cast<char*>(device)});
      for (std::size_t i = kSlotsPerChunk; i-- > 0;) free_.push_back(base + i);
    }
    index = free_.back();
    free_.pop_back();
    chunk = chunks_[index / kSlotsPerChunk];
  }
  const std::size_t offset = (index % kSlotsPerChunk) * kWordsPerSlot;
  std::uint64_t* host = chunk.host + offset;
  const std::uint64_t w = FingerprintWord(fingerprint);
  // Written before the enqueue that reads them (the launch orders the host's earlier writes).
  host[0] = w;
  host[1] = ~w;
  __atomic_store_n(&host[2], std::uint64_t{0}, __ATOMIC_RELEASE);
  __atomic_store_n(&host[3], std::uint64_t{0}, __ATOMIC_RELEASE);
  return std::make_shared<FingerprintCheck>(shared_from_this(), index, host,
                                            chunk.device + offset * sizeof(std::uint64_t));
}

void FingerprintSlots::Release(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(index);
}

}  // namespace commkit::comm::nccl
