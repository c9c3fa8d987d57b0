// CommkitWork: the c10d::Work that every operation of CommkitBackend returns, over the commkit Works
// the operation issued. wait(), is_completed(), is_success(), exception(), result() and get_future()
// keep torch.distributed's semantics:
// - Complete() waits for the commkit Works, runs the operation's copy-backs (non-contiguous or list
//   outputs), then marks the Work and its future done or failed. The caller's wait() and the backend's
//   completer thread may both drive it; it runs once.
// - The future is made on first request (most Works are never asked for one) and settled at once when
//   the Work is already done, so DDP communication hooks and Future.then() progress without a wait().
// - A failure completes the Work with the exception ToException makes (DistBackendError with commkit's
//   message); wait() rethrows it, exception() returns it (in Python through commkit's Work binding,
//   module.cc, since torch's own binding cannot convert a std::exception_ptr).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <mutex>
#include <vector>

#include "commkit/comm/process_group.h"

namespace commkit::torch_ext {

class CommkitWork final : public c10d::Work {
 public:
  CommkitWork(int rank, c10d::OpType type, std::vector<ProcessGroup::WorkPtr> works, std::function<void()> finalize,
              std::vector<at::Tensor> outputs, std::vector<c10::Device> devices);

  // Waits for the commkit Works, runs the copy-backs, then completes this Work and its future.
  // Idempotent and safe from several threads (the caller's wait() and the backend's completer).
  void Complete();
  // True when every commkit Work has finished (never blocks).
  bool AllTested();

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  float getDuration() const override;

 private:
  void Settle(c10::ivalue::Future& future, const std::exception_ptr& error);

  std::mutex drive_mu_;
  bool done_ = false;  // guarded by drive_mu_
  std::vector<ProcessGroup::WorkPtr> works_;
  std::function<void()> finalize_;
  std::vector<at::Tensor> outputs_;
  std::vector<c10::Device> devices_;
  std::mutex future_mu_;
  bool finished_ = false;  // guarded by future_mu_: Complete() has run
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by future_mu_
};

}  // namespace commkit::torch_ext
