// NcclEngine: runs NCCL calls for one process group on CUDA streams, tracks each enqueued batch
// with a CUDA event (NcclWorkState), coalesces several ops into one ncclGroupStart/End, and plugs
// into the Watchdog (async errors, per-work timeouts, bounded abort, typed errors on pending work).
//
// Internal to the NCCL backend; independent of the process-group API so the adapter stays thin.
// Threads: Enqueue/coalescing from the group's user thread(s) (serialised by an internal mutex);
// Check/Abort/FailPending from the watchdog; NcclWorkState methods from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commkit/comm/nccl/watchdog.h"
#include "nccl_comm.h"

typedef struct CUevent_st* cudaEvent_t;  // NOLINT: identical to driver_types.h

namespace commkit::comm::nccl {

class FingerprintCheck;  // nccl_fingerprint.h

// Completion events, recycled: creating one costs about a microsecond of host time per collective.
// A state gives its event back when it is destroyed, i.e. when nothing can wait on it any more.
class CudaEventPool {
 public:
  CudaEventPool() = default;
  ~CudaEventPool();
  CudaEventPool(const CudaEventPool&) = delete;
  CudaEventPool& operator=(const CudaEventPool&) = delete;
  // A timing-free event of the current device, or nullptr with the CUDA error code in *error.
  cudaEvent_t Take(int* error);
  void Give(cudaEvent_t event);

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// One enqueued batch (one op, or one coalesced group). Completion = its CUDA event, or an error set
// by the watchdog/abort. Shared by the engine (pending list) and the user's Work.
class NcclWorkState {
 public:
  NcclWorkState(std::uint64_t seq, std::string op, int device, cudaStream_t stream,
                Clock::time_point deadline);
  ~NcclWorkState();
  NcclWorkState(const NcclWorkState&) = delete;
  NcclWorkState& operator=(const NcclWorkState&) = delete;

  std::uint64_t seq() const { return seq_; }
  const std::string& op() const { return op_; }
  cudaStream_t stream() const { return stream_; }
  Clock::time_point deadline() const { return deadline_; }

  // Takes an event from `events` and records it on stream_ (after the NCCL calls were enqueued).
  Status RecordCompletion(std::shared_ptr<CudaEventPool> events);
  // The fingerprint checks issued in this batch (before it is shared): when the event fires and a
  // check found ranks that differ, the work completes with kMismatch.
  void SetChecks(std::vector<std::shared_ptr<FingerprintCheck>> checks) { checks_ = std::move(checks); }
  // Whether a check of this batch has already found a difference, done or not (a hung collective's
  // check may have completed before it).
  bool MismatchSeen() const;
  // Non-blocking: true when done (successfully or not); error() says which.
  bool Poll();
  // Marks the work complete without querying its event, because a later work on the same stream
  // completed (a stream runs its work in order). The fingerprint verdicts are read as in Poll().
  void CompleteInStreamOrder();
  // Whether Poll(), CompleteInStreamOrder() or Fail() has completed it (no event query).
  bool done() const;
  Status error() const;
  // Marks the work failed (watchdog/abort). Idempotent: the first error wins.
  void Fail(const Status& error);
  // Makes `stream` (nullptr: the legacy default stream) wait for this work on the GPU; returns
  // at once on the CPU. Returns the work's error if it already failed.
  Status WaitOnStream(cudaStream_t stream);
  // Blocks the CPU until done, an error, or `timeout` (then kTimeout; the work stays pending).
  Status Synchronize(std::chrono::milliseconds timeout);
  // Seconds between enqueue and the first Poll() that saw completion (0 while pending).
  double duration_seconds() const;

 private:
  void CompleteLocked(int query_result);  // mutex_ held; query_result is a cudaError_t
  std::string Where() const;              // "work #12 allreduce #7 on cuda:0", for error messages

  const std::uint64_t seq_;
  const std::string op_;
  const int device_;
  cudaStream_t stream_;
  const Clock::time_point deadline_;
  const Clock::time_point enqueued_;
  mutable std::mutex mutex_;
  cudaEvent_t event_ = nullptr;
  std::shared_ptr<CudaEventPool> events_;  // where event_ goes back
  std::vector<std::shared_ptr<FingerprintCheck>> checks_;  // until the work completes
  bool mismatch_seen_ = false;                              // what they said, once released
  bool done_ = false;
  Status error_;
  Clock::time_point finished_{};
};

// One NCCL call inside a batch, e.g. [=](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(...); }.
// Returns an ncclResult_t as int.
using NcclCall = std::function<int(ncclComm_t, cudaStream_t)>;
// Run after ncclGroupEnd returned (e.g. ncclRedOpDestroy of a PreMulSum op).
using NcclCleanup = std::function<void(ncclComm_t)>;

struct NcclEngineOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // default per-work timeout
};

class NcclEngine : public Watched, public std::enable_shared_from_this<NcclEngine> {
 public:
  NcclEngine(std::unique_ptr<NcclComm> comm, NcclEngineOptions options);
  ~NcclEngine() override;

  NcclComm& comm() { return *comm_; }
  const NcclEngineOptions& options() const { return options_; }

  // Enqueues `calls` (one ncclGroupStart/End when more than one) on `stream`, records the completion
  // event and registers the work for the watchdog. While coalescing, the calls are queued instead
  // and a null state is returned with OK (the coalesced work comes from EndCoalescing()).
  // `timeout` 0 = options().timeout. `check`, when given, is the fingerprint check whose Call() is
  // among `calls`; the work then completes with kMismatch when it found a difference.
  Result<std::shared_ptr<NcclWorkState>> Enqueue(std::string op, cudaStream_t stream,
                                                 std::vector<NcclCall> calls,
                                                 std::vector<NcclCleanup> cleanups,
                                                 std::chrono::milliseconds timeout,
                                                 std::shared_ptr<FingerprintCheck> check = nullptr);
  bool coalescing() const;
  Status StartCoalescing();
  // Issues every queued call in one group on the stream of the first queued op. An empty batch
  // returns a null state.
  Result<std::shared_ptr<NcclWorkState>> EndCoalescing(std::chrono::milliseconds timeout);

  // OK while healthy; the failure once the watchdog (or an enqueue) failed the communicator.
  Status failure() const;
  std::size_t pending() const;

  // Watched
  std::string Describe() const override;
  Status Check(Clock::time_point now) override;
  void Abort() override;
  void FailPending(const Status& error) override;

 private:
  void SweepCompleted();  // mutex_ held
  Result<std::shared_ptr<NcclWorkState>> Issue(std::string op, cudaStream_t stream,
                                               std::vector<NcclCall>& calls,
                                               std::vector<NcclCleanup>& cleanups,
                                               std::vector<std::shared_ptr<FingerprintCheck>> checks,
                                               std::chrono::milliseconds timeout);

  std::unique_ptr<NcclComm> comm_;
  NcclEngineOptions options_;
  mutable std::mutex mutex_;  // pending_, failure_, coalescing state, seq_
  std::vector<std::shared_ptr<NcclWorkState>> pending_;
  Status failure_;
  std::uint64_t seq_ = 0;
  bool coalescing_ = false;
  std::vector<std::string> coalesced_ops_;
  cudaStream_t coalesced_stream_ = nullptr;
  std::vector<NcclCall> coalesced_calls_;
  std::vector<NcclCleanup> coalesced_cleanups_;
  std::vector<std::shared_ptr<FingerprintCheck>> coalesced_checks_;
  std::mutex issue_mutex_;  // one batch enqueued at a time (NCCL group state is per thread)
  std::shared_ptr<CudaEventPool> events_ = std::make_shared<CudaEventPool>();
};

}  // namespace commkit::comm::nccl
