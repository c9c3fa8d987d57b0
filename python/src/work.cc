#include "work.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include "commkit/common/strings.h"
#include "errors.h"

namespace commkit::torch_ext {

CommkitWork::CommkitWork(int rank, c10d::OpType type, std::vector<ProcessGroup::WorkPtr> works,
                         std::function<void()> finalize, std::vector<at::Tensor> outputs,
                         std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      works_(std::move(works)),
      finalize_(std::move(finalize)),
      outputs_(std::move(outputs)),
      devices_(std::move(devices)) {}

void CommkitWork::Complete() {
  std::lock_guard<std::mutex> drive(drive_mu_);
  if (done_) return;
  Status failed;
  for (auto& w : works_) {
    Status s = w->Wait();
    if (!s.ok() && failed.ok()) failed = s;
  }
  if (failed.ok() && finalize_) {
    try {
      finalize_();
    } catch (const std::exception& e) {
      failed = Status::Internal(StrCat("copying results back: ", e.what()));
    }
  }
  finalize_ = nullptr;
  std::exception_ptr error = failed.ok() ? nullptr : ToException(failed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
  }
  done_ = true;
  cv_.notify_all();
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    finished_ = true;
    future = future_;
  }
  if (future) Settle(*future, error);
}

bool CommkitWork::AllTested() {
  for (auto& w : works_)
    if (!w->Test()) return false;
  return true;
}

bool CommkitWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  // Never blocks: completes here only when every commkit Work is done and nobody else is completing.
  if (!AllTested()) return false;
  std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock()) return false;
  drive.unlock();
  Complete();
  return true;
}

bool CommkitWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

bool CommkitWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    Complete();
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return completed_; }))
      C10_THROW_ERROR(DistBackendError, StrCat("commkit: ", c10d::opTypeToString(opType_),
                                               " still running after wait(timeout=", timeout.count(), " ms)"));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

// Made on first request (most Works never get asked): a future costs an allocation and a completion.
c10::intrusive_ptr<c10::ivalue::Future> CommkitWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mu_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices_);
    if (finished_) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> l(mutex_);
        error = exception_;
      }
      Settle(*future_, error);
    }
  }
  return future_;
}

float CommkitWork::getDuration() const {
  std::chrono::nanoseconds total{0};
  for (const auto& w : works_) total += w->Duration();
  return static_cast<float>(total.count()) / 1e6f;
}

void CommkitWork::Settle(c10::ivalue::Future& future, const std::exception_ptr& error) {
  if (error) {
    future.setError(error);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace commkit::torch_ext
