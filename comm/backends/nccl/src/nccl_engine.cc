#include "nccl_engine.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <thread>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "nccl_fingerprint.h"

namespace commkit::comm::nccl {
namespace {

Status CudaStatus(cudaError_t err, std::string_view where) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err), where);
}

void Backoff(int& round) {
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 10 << std::min(round, 8))));
  ++round;
}

}  // namespace

// ---- NcclWorkState ------------------------------------------------------------------------------

NcclWorkState::NcclWorkState(std::uint64_t seq, std::string op, int device, cudaStream_t stream,
                             Clock::time_point deadline)
    : seq_(seq), op_(std::move(op)), device_(device), stream_(stream), deadline_(deadline),
      enqueued_(Clock::now()) {}

std::string NcclWorkState::Where() const { return StrCat("work #", seq_, " ", op_, " on cuda:", device_); }

CudaEventPool::~CudaEventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t CudaEventPool::Take(int* error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  *error = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  return *error == cudaSuccess ? e : nullptr;
}

void CudaEventPool::Give(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(event);
}

NcclWorkState::~NcclWorkState() {
  if (event_ == nullptr) return;
  if (events_ != nullptr) {
    events_->Give(event_);
  } else {
    cudaEventDestroy(event_);
  }
}

Status NcclWorkState::RecordCompletion(std::shared_ptr<CudaEventPool> events) {
  std::lock_guard<std::mutex> lock(mutex_);
  int error = cudaSuccess;
  event_ = events->Take(&error);
  if (event_ == nullptr) {
    return CudaStatus(static_cast<cudaError_t>(error), StrCat(Where(), ": cudaEventCreate"));
  }
  events_ = std::move(events);
  cudaError_t recorded = cudaEventRecord(event_, stream_);
  if (recorded == cudaSuccess) return Status::Ok();
  return CudaStatus(recorded, StrCat(Where(), ": cudaEventRecord"));
}

bool NcclWorkState::Poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_) return true;
  if (event_ == nullptr) return false;
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  CompleteLocked(err);
  return true;
}

bool NcclWorkState::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void NcclWorkState::CompleteInStreamOrder() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_ || event_ == nullptr) return;
  CompleteLocked(cudaSuccess);
}

void NcclWorkState::CompleteLocked(int query_result) {
  const auto err = static_cast<cudaError_t>(query_result);
  done_ = true;
  finished_ = Clock::now();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    error_ = Status::BackendError(StrCat(Where(), ": CUDA ",
                                         cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                                         ". Hint: check dmesg for Xid errors and run gpudoctor"));
    return;
  }
  // The event fired after the whole group, the checks included: their results are final.
  for (const auto& check : checks_) {
    FingerprintVerdict v = check->Verdict();
    if (v == FingerprintVerdict::kDiffer) {
      error_ = Status::Mismatch(StrCat(Where(),
                                       ": the fingerprint check on the communicator found ranks that called "
                                       "different collectives (different op, type, count or root)"));
      break;
    }
    if (v == FingerprintVerdict::kPending) {
      error_ = Status::Internal(StrCat(Where(),
                                       ": the fingerprint check left no result in mapped host memory although "
                                       "the work completed; run with COMMKIT_CHECK_MISMATCH=0 and report this"));
      break;
    }
  }
  // The verdicts are folded into error_: the slots go back to the pool now, not when the engine
  // drops this state (which can be much later), so a steady stream of works reuses one chunk.
  mismatch_seen_ = error_.code() == StatusCode::kMismatch;
  checks_.clear();
}

bool NcclWorkState::MismatchSeen() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (checks_.empty()) return mismatch_seen_;
  for (const auto& check : checks_)
    if (check->Verdict() == FingerprintVerdict::kDiffer) return true;
  return false;
}

Status NcclWorkState::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void NcclWorkState::Fail(const Status& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.ok()) return;
  std::string tag = StrCat("work #", seq_, " ");
  error_ = error.message().find(tag) == std::string::npos ? error.WithContext(StrCat(tag, op_)) : error;
  if (!done_) {
    done_ = true;
    finished_ = Clock::now();
  }
}

Status NcclWorkState::WaitOnStream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.ok()) return error_;
  if (event_ == nullptr || stream == stream_) return Status::Ok();  // same stream: already ordered
  return CudaStatus(cudaStreamWaitEvent(stream, event_, 0),
                    StrCat("work #", seq_, " ", op_, ": cudaStreamWaitEvent"));
}

Status NcclWorkState::Synchronize(std::chrono::milliseconds timeout) {
  // Never cudaEventSynchronize: it cannot be bounded and hangs with a stuck collective.
  auto deadline = Clock::now() + timeout;
  int round = 0;
  while (!Poll()) {
    if (Clock::now() >= deadline) {
      return Status::Timeout(StrCat(Where(),
                                    " not complete after ", timeout.count(),
                                    " ms; a peer may be stuck (the watchdog aborts the communicator "
                                    "when the work's own timeout passes)"));
    }
    Backoff(round);
  }
  return error();
}

double NcclWorkState::duration_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return 0;
  return std::chrono::duration<double>(finished_ - enqueued_).count();
}

// ---- NcclEngine ---------------------------------------------------------------------------------

NcclEngine::NcclEngine(std::unique_ptr<NcclComm> comm, NcclEngineOptions options)
    : comm_(std::move(comm)), options_(options) {
  COMMKIT_CHECK(comm_ != nullptr, "NcclEngine needs a communicator");
}

NcclEngine::~NcclEngine() = default;  // comm_'s destructor finalizes (bounded) or aborts

bool NcclEngine::coalescing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return coalescing_;
}

Status NcclEngine::StartCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (coalescing_) {
    return Status::InvalidArgument(StrCat(Describe(), ": StartCoalescing() while already coalescing"));
  }
  coalescing_ = true;
  coalesced_ops_.clear();
  coalesced_calls_.clear();
  coalesced_cleanups_.clear();
  coalesced_checks_.clear();
  coalesced_stream_ = nullptr;
  return Status::Ok();
}

Result<std::shared_ptr<NcclWorkState>> NcclEngine::EndCoalescing(std::chrono::milliseconds timeout) {
  std::vector<NcclCall> calls;
  std::vector<NcclCleanup> cleanups;
  std::vector<std::shared_ptr<FingerprintCheck>> checks;
  std::string op;
  cudaStream_t stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!coalescing_) {
      return Status::InvalidArgument(StrCat(Describe(), ": EndCoalescing() without StartCoalescing()"));
    }
    coalescing_ = false;
    calls.swap(coalesced_calls_);
    cleanups.swap(coalesced_cleanups_);
    checks.swap(coalesced_checks_);
    op = StrCat("coalesced[", Join(coalesced_ops_, ","), "]");
    stream = coalesced_stream_;
  }
  if (calls.empty()) return std::shared_ptr<NcclWorkState>();
  return Issue(std::move(op), stream, calls, cleanups, std::move(checks), timeout);
}

Result<std::shared_ptr<NcclWorkState>> NcclEngine::Enqueue(std::string op, cudaStream_t stream,
                                                           std::vector<NcclCall> calls,
                                                           std::vector<NcclCleanup> cleanups,
                                                           std::chrono::milliseconds timeout,
                                                           std::shared_ptr<FingerprintCheck> check) {
  // Ops refused here were never issued: release what they created (PreMulSum ops).
  auto drop = [&] {
    for (auto& cleanup : cleanups) cleanup(comm_->raw());
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) {
      if (!comm_->aborted()) drop();
      return Status(failure_.code(), StrCat(Describe(), ": ", op, " refused: the communicator failed "
                                            "earlier (abort and recreate the group): ",
                                            failure_.message()));
    }
    if (coalescing_) {
      if (coalesced_calls_.empty()) {
        coalesced_stream_ = stream;
      } else if (stream != coalesced_stream_) {
        drop();
        return Status::InvalidArgument(StrCat(Describe(), ": ", op, " uses a different CUDA stream "
                                              "than the first op of the coalescing block"));
      }
      coalesced_ops_.push_back(std::move(op));
      for (auto& c : calls) coalesced_calls_.push_back(std::move(c));
      for (auto& c : cleanups) coalesced_cleanups_.push_back(std::move(c));
      if (check) coalesced_checks_.push_back(std::move(check));
      return std::shared_ptr<NcclWorkState>();
    }
  }
  std::vector<std::shared_ptr<FingerprintCheck>> checks;
  if (check) checks.push_back(std::move(check));
  return Issue(std::move(op), stream, calls, cleanups, std::move(checks), timeout);
}

Result<std::shared_ptr<NcclWorkState>> NcclEngine::Issue(std::string op, cudaStream_t stream,
                                                         std::vector<NcclCall>& calls,
                                                         std::vector<NcclCleanup>& cleanups,
                                                         std::vector<std::shared_ptr<FingerprintCheck>> checks,
                                                         std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds(0)) timeout = options_.timeout;
  std::lock_guard<std::mutex> issue_lock(issue_mutex_);
  // Context strings are formatted only on the error paths: this runs once per collective.
  DeviceGuard guard(comm_->device());
  if (!guard.status().ok()) return guard.status().WithContext(StrCat(Describe(), ": ", op));
  auto deadline = Clock::now() + timeout;
  ncclComm_t raw = comm_->raw();
  bool grouped = calls.size() > 1;
  int result = ncclSuccess;
  if (grouped) ncclGroupStart();
  for (auto& call : calls) {
    result = call(raw, stream);
    if (result != ncclSuccess && result != ncclInProgress) break;
  }
  if (grouped) {
    ncclResult_t end = ncclGroupEnd();
    if (result == ncclSuccess || result == ncclInProgress) result = end;
  }
  Status enqueued =
      result == ncclSuccess ? Status::Ok() : comm_->CheckEnqueue(result, StrCat(Describe(), ": ", op), deadline);
  for (auto& cleanup : cleanups) cleanup(raw);
  if (!enqueued.ok()) {
    if (NcclRecoveryFor(result) == NcclRecovery::kAbortCommunicator || enqueued.code() == StatusCode::kTimeout) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.ok()) failure_ = enqueued;  // the watchdog aborts at its next poll
    }
    return enqueued;
  }
  std::shared_ptr<NcclWorkState> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work = std::make_shared<NcclWorkState>(++seq_, std::move(op), comm_->device(), stream, deadline);
  }
  work->SetChecks(std::move(checks));
  COMMKIT_RETURN_IF_ERROR(work->RecordCompletion(events_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) {
      work->Fail(failure_);  // failed between enqueue and registration
    } else {
      pending_.push_back(work);
    }
  }
  return work;
}

Status NcclEngine::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

std::size_t NcclEngine::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

std::string NcclEngine::Describe() const { return comm_->Describe(); }

// Works on one stream complete in issue order, so per stream a binary search over the pending works
// finds the first one still running with O(log n) event queries, and everything before it is complete
// without asking CUDA about each (at a high call rate thousands of works are pending per sweep, and
// the sweep holds mutex_, which Issue() needs).
void NcclEngine::SweepCompleted() {
  std::vector<cudaStream_t> streams;
  for (const auto& w : pending_)
    if (std::find(streams.begin(), streams.end(), w->stream()) == streams.end()) streams.push_back(w->stream());
  std::vector<NcclWorkState*> mine;
  for (cudaStream_t stream : streams) {
    mine.clear();
    for (const auto& w : pending_)
      if (w->stream() == stream) mine.push_back(w.get());
    std::size_t lo = 0, hi = mine.size();  // invariant: [0, lo) complete, [hi, n) still running
    while (lo < hi) {
      std::size_t mid = lo + (hi - lo) / 2;
      if (mine[mid]->Poll()) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    for (std::size_t i = 0; i < lo; ++i) mine[i]->CompleteInStreamOrder();
  }
}

Status NcclEngine::Check(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return failure_;
  if (comm_->aborted()) return Status::Aborted(StrCat(Describe(), ": communicator was aborted"));
  Status async = comm_->AsyncError();
  if (!async.ok()) return async;
  SweepCompleted();
  Status timed_out;
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const std::shared_ptr<NcclWorkState>& w) {
                                  if (w->done()) {
                                    // Mismatches do not break the communicator, and the caller
                                    // may never look at this work: say it here too.
                                    Status e = w->error();
                                    if (e.code() == StatusCode::kMismatch)
                                      COMMKIT_LOG_ERROR(Describe(), ": ", e.message());
                                    return true;
                                  }
                                  if (timed_out.ok() && now >= w->deadline()) {
                                    const std::string what = StrCat(Describe(), ": work #", w->seq(), " ", w->op(),
                                                                    " ran past its timeout (", pending_.size(),
                                                                    " work(s) pending)");
                                    // The timed-out work fails now, before the (possibly slow)
                                    // abort; the others fail in FailPending after the abort. When
                                    // its fingerprint check (which completed before the hang) says
                                    // the ranks called different collectives, that is the cause:
                                    // the work fails with kMismatch and the others are aborted.
                                    if (w->MismatchSeen()) {
                                      w->Fail(Status::Mismatch(StrCat(
                                          what, ": ranks called different collectives (the fingerprint check "
                                          "on the communicator disagreed); the collective hung and the "
                                          "communicator is aborted")));
                                      timed_out = Status::Aborted(StrCat(
                                          what, ": it hung after ranks called different collectives"));
                                    } else {
                                      timed_out = Status::Timeout(StrCat(
                                          what, "; a peer is stuck, dead or called a different collective. "
                                          "Check the other ranks' logs"));
                                      w->Fail(timed_out);
                                    }
                                    return true;
                                  }
                                  return false;
                                }),
                 pending_.end());
  return timed_out;
}

void NcclEngine::Abort() { comm_->Abort(); }

void NcclEngine::FailPending(const Status& error) {
  std::vector<std::shared_ptr<NcclWorkState>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.ok()) failure_ = error;
    pending.swap(pending_);
  }
  for (auto& w : pending) w->Fail(error);
}

}  // namespace commkit::comm::nccl
