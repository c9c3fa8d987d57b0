// POSIX shared-memory segments for ranks on one host (the host backend's transport, the mpi backend's
// slots): create (with the memory reserved up front, so a full /dev/shm is an error here and not a
// SIGBUS later), open a peer's, unlink the name once every rank has mapped it (nothing is left behind
// in /dev/shm when a rank dies afterwards).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit::shm {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // A new segment `name` ("/commkit.<token>.<rank>") of `bytes`, zero-filled and reserved. When
  // /dev/shm is too small the error says how to enlarge it, then `shrink` (how the caller's own
  // setting makes the segment smaller), if given.
  static Result<ShmSegment> Create(const std::string& name, std::size_t bytes, std::string_view shrink = {});
  // Maps an existing segment; fails unless it is exactly `bytes` long (`why_size`: the setting that
  // decides the size, named in that error).
  static Result<ShmSegment> Open(const std::string& name, std::size_t bytes, std::string_view why_size = {});

  // Removes the name; the mapping stays valid. Idempotent.
  void Unlink();

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // unlinks the name on destruction if it still exists
};

// Free bytes on the file system behind shm_open (/dev/shm), or nullopt when unknown.
Result<std::uint64_t> ShmFreeBytes();

// What ranks must share to use each other's segments: "<hostname>|<boot id>|<ipc ns>|<mount ns>", or
// COMMKIT_HOST_DOMAIN when set (ranks with different values never use shared memory between them).
std::string ShmDomain();
// The pid namespace (ranks in the same one can check each other's liveness with kill(pid, 0)).
std::string PidNamespace();

}  // namespace commkit::shm
