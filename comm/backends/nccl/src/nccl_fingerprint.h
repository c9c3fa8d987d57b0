// The fingerprint check the NCCL backend issues with a collective (Backend::ChecksMismatchOnCompletion):
// every rank contributes [w, ~w] of its call's fingerprint word w to a 16-byte MAX all-reduce in the
// collective's own ncclGroupStart/End, so it costs no extra launch and no store traffic. Both the
// input and the result live in mapped pinned host memory: the host writes the input before the
// enqueue and reads the result without a copy or a synchronisation, once the work's completion
// event fired, or earlier when a watchdog looks at a work that hangs.
//
// Internal to the NCCL backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "commkit/common/status.h"
#include "nccl_engine.h"

namespace commkit::comm::nccl {

// The word a rank contributes for `fingerprint`: top bit set and bit 0 clear, so neither it nor its
// complement is ever 0, the value a result slot starts with (62 bits of the fingerprint survive).
std::uint64_t FingerprintWord(std::uint64_t fingerprint);

enum class FingerprintVerdict { kPending, kAgree, kDiffer };
// From the MAX all-reduce of [w, ~w]: max(~w) == ~min(w), so all ranks agree exactly when
// max_word == ~max_complement. kPending while either result word is still 0 (not written yet).
FingerprintVerdict JudgeFingerprint(std::uint64_t max_word, std::uint64_t max_complement);

class FingerprintSlots;

// One collective's check: a 32-byte slot (input [w, ~w], result [max w, max ~w]) of the pool.
class FingerprintCheck {
 public:
  FingerprintCheck(std::shared_ptr<FingerprintSlots> pool, std::size_t index, std::uint64_t* host, char* device);
  ~FingerprintCheck();  // gives the slot back (the work that used it has finished or was aborted)
  FingerprintCheck(const FingerprintCheck&) = delete;
  FingerprintCheck& operator=(const FingerprintCheck&) = delete;

  // ncclAllReduce(input, result, 2, ncclUint64, ncclMax): the first call of the collective's group.
  NcclCall Call() const;
  // Reads the result words as the device left them (safe while the device may still write them).
  FingerprintVerdict Verdict() const;

 private:
  std::shared_ptr<FingerprintSlots> pool_;
  std::size_t index_;
  std::uint64_t* host_;  // [w, ~w, max w, max ~w]
  char* device_;         // the same memory as the device addresses it
};

// Slots of mapped pinned host memory for one communicator's device, allocated in chunks as needed
// (a slot is in use from the enqueue to the end of its work: as many as the works in flight).
class FingerprintSlots : public std::enable_shared_from_this<FingerprintSlots> {
 public:
  static constexpr std::size_t kSlotsPerChunk = 256;  // 8 KiB of pinned memory per chunk
  explicit FingerprintSlots(int device) : device_(device) {}
  ~FingerprintSlots();
  FingerprintSlots(const FingerprintSlots&) = delete;
  FingerprintSlots& operator=(const FingerprintSlots&) = delete;

  // A slot holding `fingerprint`'s input and a cleared result.
  Result<std::shared_ptr<FingerprintCheck>> Acquire(std::uint64_t fingerprint);
  std::size_t capacity() const;

 private:
  friend class FingerprintCheck;
  void Release(std::size_t index);

  struct Chunk {
    std::uint64_t* host = nullptr;
    char* device = nullptr;
  };
  const int device_;
  mutable std::mutex mutex_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> free_;
};

}  // namespace commkit::comm::nccl
