#include "executor.h"

#include <algorithm>

#include "commkit/common/strings.h"

namespace commkit {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool HostWork::Test() {
  if (help_) help_(milliseconds(0));  // never runs the operation here, only gets it going
  Work* then;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) return false;
    then = state_->then.get();
  }
  return then == nullptr || then->Test();
}

Status HostWork::WaitHostPart(milliseconds timeout, Work** then) {
  if (help_) help_(timeout);
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; }))
    return Status::Timeout(StrCat("operation #", seq_, " still running after waiting ",
                                  HumanSeconds(timeout.count() / 1000.0)));
  *then = state_->then.get();
  return state_->status;
}

Status HostWork::Wait(milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  Work* then = nullptr;
  Status s = WaitHostPart(timeout, &then);
  if (!s.ok() || then == nullptr) return s;
  return then->Wait(std::max(std::chrono::duration_cast<milliseconds>(until - Clock::now()), milliseconds(0)));
}

Status HostWork::Synchronize(milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  Work* then = nullptr;
  Status s = WaitHostPart(timeout, &then);
  if (!s.ok() || then == nullptr) return s;
  return then->Synchronize(std::max(std::chrono::duration_cast<milliseconds>(until - Clock::now()), milliseconds(0)));
}

Status HostWork::status() const {
  Work* then;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done || !state_->status.ok() || state_->then == nullptr) return state_->status;
    then = state_->then.get();
  }
  return then->status();
}

std::chrono::nanoseconds HostWork::Duration() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done ? state_->end - state_->start : std::chrono::nanoseconds(0);
}

void SerialExecutor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::shared_ptr<SerialExecutor::Task> SerialExecutor::Post(std::function<void()> run) {
  auto task = std::make_shared<Task>();
  task->run = std::move(run);
  task->posted = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(task);
  return task;
}

void SerialExecutor::Nudge() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;
    nudged_ = true;  // kept while a task runs: the thread goes on with the queue right after it
  }
  cv_.notify_all();
}

void SerialExecutor::Help(const std::shared_ptr<Task>& task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_ || task->done) return;
  if (running_) {
    // An earlier task runs (maybe just finishing): have the thread take ours right after it.
    nudged_ = true;
    lock.unlock();
    cv_.notify_all();
    return;
  }
  running_ = true;
  while (!task->done && !queue_.empty()) {
    std::shared_ptr<Task> next = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    next->run();
    lock.lock();
    next->done = true;
  }
  running_ = false;
  if (queue_.empty()) nudged_ = false;
}

void SerialExecutor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (stopping_ && queue_.empty() && !running_) return;
    if (running_ || queue_.empty()) {
      // Idle (a post does not wake the thread), or a caller is helping.
      cv_.wait_for(lock, queue_.empty() ? kLongestIdle : kGrace);
      continue;
    }
    const auto age = Clock::now() - queue_.front()->posted;
    if (!stopping_ && !nudged_ && age < kGrace) {
      cv_.wait_for(lock, kGrace - age);  // leave it to a waiting caller for a moment
      continue;
    }
    nudged_ = false;
    std::shared_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task->run();
    lock.lock();
    task->done = true;
    running_ = false;
  }
}

}  // namespace commkit
