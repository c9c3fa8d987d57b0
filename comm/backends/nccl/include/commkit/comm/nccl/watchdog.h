// Watchdog: a background thread that polls communicators for asynchronous errors and timed-out work,
// aborts them within a bounded deadline and fails their pending work with a typed error.
//
// Generic (no NCCL types) so its policy is unit-tested on CPU with fake communicators; the NCCL
// backend implements Watched with ncclCommGetAsyncError / cudaEventQuery / ncclCommAbort.
//
// Rules it implements (NCCL user guide "Fault Tolerance"; pytorch#119797, PR #119250, PR #192105):
//  - Abort can hang. Each abort runs on its own thread; the watchdog waits at most abort_deadline and
//    then reports "abort did not finish" instead of waiting forever. The hung thread is detached and
//    keeps the Watched alive (a leak by design: the process should exit).
//  - Communicators that fail together are aborted together (one GroupAbort call), because NCCL needs
//    simultaneously hung communicators to be aborted inside one ncclGroupStart/End.
//  - The watchdog never terminates the process and never throws: it reports through FailPending and
//    the on_failure callback; the application decides.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::comm::nccl {

// One communicator (or one process group's communicators) under watch. Thread safety: Check() is
// called only from the watchdog thread; Abort() from an abort thread; FailPending() from the
// watchdog thread; implementations synchronise with their own users.
class Watched {
 public:
  virtual ~Watched() = default;
  // A short name for messages ("group 'tp0' (rank 3/8)").
  virtual std::string Describe() const = 0;
  // Non-blocking health check at time `now`: completes finished work and returns non-OK when the
  // communicator failed asynchronously or a work ran past its timeout.
  virtual Status Check(std::chrono::steady_clock::time_point now) = 0;
  // Aborts the communicator(s). May block or hang; must be safe to call once after a failure.
  virtual void Abort() = 0;
  // Completes every pending work (and every later one) with `error`. Must not block.
  virtual void FailPending(const Status& error) = 0;
};

struct WatchdogOptions {
  std::string name = "commkit-watchdog";
  std::chrono::milliseconds poll_interval{50};
  // How long an abort may take before the watchdog gives up waiting and reports.
  std::chrono::milliseconds abort_deadline{std::chrono::seconds(10)};
  // When one watched communicator fails, abort and fail all of them (NCCL: communicators that may be
  // hung together must be aborted together).
  bool abort_all_on_failure = true;
  // Aborts several Watched in one call (the NCCL backend wraps the aborts in ncclGroupStart/End).
  // Default: calls Abort() on each in order.
  std::function<void(const std::vector<std::shared_ptr<Watched>>&)> group_abort;
  // Called on the watchdog thread once per failure, after FailPending, with the final error.
  std::function<void(const Status&)> on_failure;
};

class Watchdog {
 public:
  explicit Watchdog(WatchdogOptions options);
  // Stops the thread (bounded: at most one poll plus one abort_deadline).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Watch(std::shared_ptr<Watched> watched);
  // Stops watching; no further calls into `watched` are made after this returns, except an abort
  // that is already running. Returns false when it was not watched.
  bool Unwatch(const Watched* watched);

  // The first failure reported (OK while healthy).
  Status first_failure() const;
  // Number of failures handled (aborts started).
  std::uint64_t failures() const;

 private:
  void Run();
  void HandleFailure(std::vector<std::shared_ptr<Watched>> victims, Status error);

  WatchdogOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Watched>> watched_;
  Status first_failure_;
  std::uint64_t failures_ = 0;
  std::thread thread_;
};

}  // namespace commkit::comm::nccl
