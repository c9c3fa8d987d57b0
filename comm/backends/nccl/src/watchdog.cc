#include "commkit/comm/nccl/watchdog.h"

#include <algorithm>
#include <utility>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm::nccl {
namespace {

// Shared between the watchdog and one abort thread: lives as long as the longer of the two.
struct AbortState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
};

}  // namespace

Watchdog::Watchdog(WatchdogOptions options) : options_(std::move(options)) {
  if (options_.poll_interval <= std::chrono::milliseconds(0)) options_.poll_interval = std::chrono::milliseconds(1);
  if (options_.abort_deadline < std::chrono::milliseconds(0)) options_.abort_deadline = std::chrono::milliseconds(0);
  thread_ = std::thread([this] { Run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Watch(std::shared_ptr<Watched> watched) {
  COMMKIT_CHECK(watched != nullptr, "Watchdog::Watch(nullptr)");
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.push_back(std::move(watched));
}

bool Watchdog::Unwatch(const Watched* watched) {
  // Run() holds mutex_ across a Check round, so taking it here waits for a running round.
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = std::find_if(watched_.begin(), watched_.end(),
                         [&](const std::shared_ptr<Watched>& w) { return w.get() == watched; });
  if (it == watched_.end()) return false;
  watched_.erase(it);
  return true;
}

Status Watchdog::first_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_failure_;
}

std::uint64_t Watchdog::failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failures_;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, options_.poll_interval, [this] { return stop_; });
    if (stop_) break;
    // Checks run under the lock so that Unwatch() returning guarantees no further Check() call.
    // Check() is non-blocking by contract, so this holds the lock only briefly.
    auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Watched>> failed;
    Status error;
    for (const auto& w : watched_) {
      Status s = w->Check(now);
      if (!s.ok()) {
        if (error.ok()) error = s.WithContext(w->Describe());
        failed.push_back(w);
      }
    }
    if (failed.empty()) continue;
    std::vector<std::shared_ptr<Watched>> victims = options_.abort_all_on_failure ? watched_ : failed;
    // Victims leave the watch list: they are failed for good.
    watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                  [&](const std::shared_ptr<Watched>& w) {
                                    return std::find(victims.begin(), victims.end(), w) != victims.end();
                                  }),
                   watched_.end());
    ++failures_;
    lock.unlock();
    HandleFailure(std::move(victims), std::move(error));
    lock.lock();
  }
}

void Watchdog::HandleFailure(std::vector<std::shared_ptr<Watched>> victims, Status error) {
  std::vector<std::string> names;
  for (const auto& v : victims) names.push_back(v->Describe());
  COMMKIT_LOG_ERROR(options_.name, ": ", error.ToString(), "; aborting ", Join(names, ", "));

  auto state = std::make_shared<AbortState>();
  auto group_abort = options_.group_abort;
  // The abort thread owns copies of everything it touches, so a hung abort outlives this call safely.
  std::thread aborter([state, victims, group_abort] {
    if (group_abort) {
      group_abort(victims);
    } else {
      for (const auto& v : victims) v->Abort();
    }
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done = true;
    }
    state->cv.notify_all();
  });
  bool finished;
  {
    std::unique_lock<std::mutex> lock(state->mutex);
    finished = state->cv.wait_for(lock, options_.abort_deadline, [&] { return state->done; });
  }
  Status final_error;
  if (finished) {
    aborter.join();
    final_error = Status(error.code(), StrCat(error.message(), " (communicator aborted)"));
  } else {
    aborter.detach();
    final_error = Status(error.code(),
                         StrCat(error.message(), "; abort did not finish within ",
                                options_.abort_deadline.count(),
                                " ms (ncclCommAbort can hang): the communicator is leaked and this "
                                "process should exit so its peers can recover"));
    COMMKIT_LOG_ERROR(options_.name, ": abort of ", Join(names, ", "), " still running after ",
                      options_.abort_deadline.count(), " ms; giving up waiting");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_failure_.ok()) first_failure_ = final_error;
  }
  for (const auto& v : victims) v->FailPending(final_error);
  if (options_.on_failure) options_.on_failure(final_error);
}

}  // namespace commkit::comm::nccl
