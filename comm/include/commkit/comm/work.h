// Work: the handle of an operation that may still be running.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "commkit/common/status.h"

namespace commkit {

class Work {
 public:
  virtual ~Work() = default;

  // True when the operation has finished (successfully or not). Never blocks.
  virtual bool Test() = 0;

  // Waits for completion, at most `timeout`. Returns the operation's status: OK, or its error with
  // context ("allreduce #12 on group world (rank 3/8): ..."). A timeout of the wait itself is
  // StatusCode::kTimeout and leaves the operation running. For device work (NCCL), Wait() makes the
  // caller's stream wait and returns without blocking the CPU; Synchronize() blocks.
  virtual Status Wait(std::chrono::milliseconds timeout) = 0;
  Status Wait() { return Wait(std::chrono::hours(24 * 365)); }
  virtual Status Synchronize(std::chrono::milliseconds timeout) { return Wait(timeout); }

  // The final status once Test() is true (OK before).
  virtual Status status() const = 0;

  // Time from start to completion (zero until complete).
  virtual std::chrono::nanoseconds Duration() const = 0;

  // The operation's sequence number in its group (1, 2, ...).
  virtual std::uint64_t Sequence() const = 0;
};

// A Work that has already finished with `status`: for backends whose Run() completes the operation
// before it returns (host memory, blocking libraries).
std::unique_ptr<Work> CompletedWork(Status status, std::uint64_t sequence, std::chrono::nanoseconds duration = {});

}  // namespace commkit
