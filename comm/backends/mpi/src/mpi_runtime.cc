#include "mpi_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm::mpi {

using Clock = std::chrono::steady_clock;

Runtime& Rt() {
  static Runtime* rt = new Runtime();  // never destroyed: used from atexit
  return *rt;
}

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return StrCat("MPI error ", rc);
  return StrCat(std::string(text, static_cast<std::size_t>(len)), " (MPI error ", rc, ")");
}

void NoteFailure(std::string_view what) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> lock(rt.failure_mu);
  if (rt.failure.empty()) rt.failure = std::string(what);
  rt.failed.store(true);
}

int CancelAndDrain(MPI_Request* reqs, int n, bool cancellable) {
  if (cancellable) {
    CallGuard g;
    for (int i = 0; i < n; ++i)
      if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
  }
  // A cancelled receive completes at once; one already matched completes as its data arrives.
  constexpr auto kDrain = std::chrono::milliseconds(200);
  const auto until = Clock::now() + kDrain;
  while (true) {
    int left = 0;
    {
      CallGuard g;
      for (int i = 0; i < n; ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        if (MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) ++left;
      }
    }
    if (left == 0 || Clock::now() >= until) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void KeepOrphans(MPI_Request* reqs, int n, std::shared_ptr<void> keep) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> lock(rt.failure_mu);
  for (int i = 0; i < n; ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    rt.orphans.push_back(Orphan{reqs[i], keep});
    reqs[i] = MPI_REQUEST_NULL;
  }
}

std::size_t ReapOrphans() {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> lock(rt.failure_mu);
  auto& v = rt.orphans;
  for (auto it = v.begin(); it != v.end();) {
    int flag = 0;
    {
      CallGuard g;
      if (MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 0;
    }
    it = flag ? v.erase(it) : it + 1;
  }
  return v.size();
}

namespace {

std::atomic<bool> g_finalize_returned{false};

// How long MPI_Finalize may take at exit after an operation failed (COMMKIT_MPI_FINALIZE_TIMEOUT).
std::chrono::milliseconds FinalizeGrace() {
  auto v = EnvDurationOr("COMMKIT_MPI_FINALIZE_TIMEOUT", std::chrono::milliseconds(10'000));
  return v.ok() ? *v : std::chrono::milliseconds(10'000);
}

[[noreturn]] void AbortJob(int code, std::string_view why) {
  std::fprintf(stderr, "commkit mpi backend: %.*s; ending the job with MPI_Abort(%d) instead of MPI_Finalize\n",
               static_cast<int>(why.size()), why.data(), code);
  std::fflush(stderr);
  // MPI_Abort normally ends this process at once; should the launcher not answer, exit anyway.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// At exit (registered with on_exit: it sees the exit status). Without a failure: MPI_Finalize. After
// one, MPI_Finalize could wait forever for the rank that failed, or crash in a request MPI could not
// cancel, so:
// - the process exits with an error (status != 0): MPI_Abort with that status, which also ends the
//   ranks still waiting for this one (the launcher reports the status);
// - otherwise (the program handled the failure and exits 0): MPI_Finalize, but at most
//   COMMKIT_MPI_FINALIZE_TIMEOUT (10 s), then _exit(1). Requests MPI could not cancel may still be
//   pending then; what commkit gave them (owned copies, scratch) is never freed before the process
//   ends.
void FinalizeOnExit(int status, void*) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  Runtime& rt = Rt();
  if (rt.failed.load()) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(rt.failure_mu);
      failure = rt.failure;
    }
    if (status != 0) AbortJob(status, StrCat("exit status ", status, " after a failed operation (", failure, ")"));
    // Requests MPI could not cancel may still be pending; the memory commkit gave them is kept until
    // the process ends, so finalizing with them is safe for commkit's buffers.
    if (std::size_t left = ReapOrphans(); left > 0)
      COMMKIT_LOG_DEBUG("mpi backend: finalizing with ", left, " request(s) of a failed operation still pending");
    const auto grace = FinalizeGrace();
    std::thread([grace] {
      // Only MPI_Finalize is bounded: what runs after it at exit (LeakSanitizer's check, other exit
      // handlers) may take as long as it takes.
      for (const auto until = Clock::now() + grace; Clock::now() < until;) {
        if (g_finalize_returned.load()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (g_finalize_returned.load()) return;
      std::fprintf(stderr, "commkit mpi backend: MPI_Finalize did not return within %s after a failed operation "
                           "(a peer is not finalizing); exiting with status 1\n",
                   HumanSeconds(static_cast<double>(grace.count()) / 1000.0).c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }).detach();
  }
  MPI_Finalize();
  g_finalize_returned.store(true);
}

std::string_view ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

Status EnsureInitialized() {
  Runtime& rt = Rt();
  std::call_once(rt.once, [&rt] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      rt.init_status = Status::Unavailable("mpi backend: MPI was already finalized in this process");
      return;
    }
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        rt.init_status = Status::BackendError(StrCat("mpi backend: MPI_Init_thread failed: ", MpiError(rc)));
        return;
      }
      rt.initialized_by_us = true;
      ::on_exit(&FinalizeOnExit, nullptr);
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      rt.serialise = true;
      COMMKIT_LOG_WARN("mpi backend: the MPI library granted ", ThreadLevelName(provided),
                       " instead of MPI_THREAD_MULTIPLE; commkit serialises every MPI call process-wide "
                       "(groups no longer progress concurrently). Build Open MPI with thread support to avoid this.");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag && ub != nullptr) rt.tag_ub = *static_cast<int*>(ub);
  });
  return rt.init_status;
}


}  // namespace commkit::comm::mpi
