// The MPI backend's process-wide state: initialisation, the serialising lock for libraries without
// MPI_THREAD_MULTIPLE, and what happens to a job after an operation failed (requests MPI could not
// cancel, a bounded end at exit). Private to commkit::comm_mpi; mpi.h is included by its users.
#pragma once

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::comm::mpi {

// A request of a failed operation that MPI could not cancel (a started collective, a send to a rank
// that never received it), with the memory it reads or writes: kept until it completes or the job
// ends, so a late peer's data never lands in (or is read from) memory that was freed.
struct Orphan {
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<void> keep;
};

struct Runtime {
  std::once_flag once;
  Status init_status;
  bool initialized_by_us = false;
  bool serialise = false;  // the library granted less than MPI_THREAD_MULTIPLE
  std::mutex mu;           // held around every MPI call when serialise
  int tag_ub = 32767;
  // Set when an operation failed (timeout, abort, MPI error): peers may be stuck mid-collective, so
  // MPI_Finalize (which waits for every rank) is not called unbounded at exit.
  std::atomic<bool> failed{false};
  std::mutex failure_mu;
  std::string failure;           // the first failure, for the exit message
  std::vector<Orphan> orphans;   // guarded by failure_mu
};

Runtime& Rt();

// Held around each MPI call: a no-op with MPI_THREAD_MULTIPLE, the process-wide lock otherwise.
class CallGuard {
 public:
  CallGuard() : lock_(Rt().mu, std::defer_lock) {
    if (Rt().serialise) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

std::string MpiError(int rc);

// MPI_Init_thread once per process (unless the program did); registers the exit handler.
Status EnsureInitialized();

// Records a failed operation (the first one's text is kept for the exit message).
void NoteFailure(std::string_view what);

// After a failed operation: cancels its requests where MPI can (`cancellable`: point-to-point
// requests; MPI forbids cancelling collectives) and waits a bounded moment for them to complete.
// Returns how many are still pending (those stay in `reqs`; the others are MPI_REQUEST_NULL).
int CancelAndDrain(MPI_Request* reqs, int n, bool cancellable);

// Keeps the still-pending requests of `reqs` as orphans together with `keep`, the memory they use.
void KeepOrphans(MPI_Request* reqs, int n, std::shared_ptr<void> keep);

// Drops orphans that completed since; returns how many remain.
std::size_t ReapOrphans();

}  // namespace commkit::comm::mpi
