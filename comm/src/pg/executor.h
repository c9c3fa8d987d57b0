// How ProcessGroup runs operations off the caller's thread: the completion state a Work shares with
// the thread that runs it, and the serial executors that run a group's sends and receives (private to
// commkit::comm).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "commkit/comm/work.h"

namespace commkit {

// Completion state shared by the caller's Work and the worker that runs the operation.
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  std::chrono::steady_clock::time_point start{}, end{};
  // The part of the operation that completes after the worker is done (set with `done`, never
  // changed afterwards): the Work the backend returned for a collective it checks on completion.
  std::unique_ptr<Work> then;
};

// The Work of an operation queued for a worker or an executor.
class HostWork final : public Work {
 public:
  // `help(timeout)`, when given, may run the operation on the waiting thread (see SerialExecutor).
  HostWork(std::shared_ptr<WorkState> state, std::uint64_t seq,
           std::function<void(std::chrono::milliseconds)> help = {})
      : state_(std::move(state)), seq_(seq), help_(std::move(help)) {}
  bool Test() override;
  Status Wait(std::chrono::milliseconds timeout) override;
  Status Synchronize(std::chrono::milliseconds timeout) override;
  Status status() const override;
  std::chrono::nanoseconds Duration() const override;
  std::uint64_t Sequence() const override { return seq_; }

 private:
  std::shared_ptr<WorkState> state_;
  std::uint64_t seq_;
  std::function<void(std::chrono::milliseconds)> help_;

  // Waits for the worker's part; its status, and the part that completes later (null when none).
  Status WaitHostPart(std::chrono::milliseconds timeout, Work** then);
};

// Runs tasks one at a time in the order they were posted (the sends, or the receives, of a group).
// Small point-to-point operations cost less than the thread hand-offs of a plain worker thread (a
// wake-up on posting, another on completion), so:
// - the caller that waits for a task runs it itself (Help) when nothing of this executor is running,
//   taking the queue's head tasks up to its own, in order;
// - posting does not wake the thread. It takes a task when the task has waited kGrace without a
//   helper, when nudged (Nudge: a caller is about to block on something else — its other direction,
//   or a collective — so a send and a receive posted together never wait on each other), or when
//   stopping. Idle, it looks at its queue every 10 ms, so an operation nobody waits for (or tests)
//   still completes.
class SerialExecutor {
 public:
  struct Task {
    std::function<void()> run;
    std::chrono::steady_clock::time_point posted;
    bool done = false;  // guarded by the executor's mutex
  };

  SerialExecutor() : thread_([this] { Loop(); }) {}
  ~SerialExecutor() { Shutdown(); }
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Runs what is queued, then stops the thread; Help does nothing afterwards. Idempotent.
  void Shutdown();
  std::shared_ptr<Task> Post(std::function<void()> run);
  // Makes the thread take queued tasks now (when nothing runs them).
  void Nudge();
  // Runs queued tasks up to and including `task` on this thread when no task is running; returns
  // without running anything otherwise (the caller then waits for the executor's thread).
  void Help(const std::shared_ptr<Task>& task);

 private:
  static constexpr std::chrono::microseconds kGrace{100};
  static constexpr std::chrono::microseconds kLongestIdle{10'000};

  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool running_ = false;  // a task is running (on the thread or a helping caller)
  bool stopping_ = false;
  bool nudged_ = false;
  std::thread thread_;
};

}  // namespace commkit
