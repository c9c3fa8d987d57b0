// The MPI backend's Backend class, private to commkit::comm_mpi: lifecycle and request progress here,
// creation in mpi_backend.cc, the collectives in mpi_collectives.cc. mpi.h is included only by this
// backend's sources.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "mpi_runtime.h"
#include "mpi_types.h"
#include "shm/slot_meeting.h"

namespace commkit::comm::mpi {

using Clock = std::chrono::steady_clock;

// The group's selection table (tuning.h): which all-reduce algorithm runs at each size.
Result<tune::Table> MpiTable(const BackendContext& ctx);

class MpiBackend final : public Backend {
 public:
  // `p2p`: run the collectives that mpi_collectives.cc builds from messages over a private duplicate
  // of `comm` (the algorithm layer over Transport below) instead of MPI's nonblocking collectives. Collective over `comm`.
  //
  // `shm`: meet in the shared-memory transport's slots first (comm/src/shm/shm_transport.h) when
  // every rank is on this node; collective over `comm` too.
  MpiBackend(MPI_Comm comm, int rank, int size, std::string group, bool p2p, bool shm, std::chrono::microseconds spin,
             tune::Table table)
      : comm_(comm), rank_(rank), size_(size), group_(std::move(group)), spin_(spin), table_(std::move(table)) {
    shm_enabled_ = shm;
    if (shm) shm_ = ConnectShm();
    if (p2p && size_ > 1) {
      CallGuard g;
      if (MPI_Comm_dup(comm_, &p2p_comm_) == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
      } else {
        p2p_comm_ = MPI_COMM_NULL;
        COMMKIT_LOG_WARN("mpi backend: MPI_Comm_dup for point-to-point collectives failed; group ", group_,
                         " uses MPI's nonblocking collectives");
      }
    }
  }

  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A communicator with a pending (timed-out) operation cannot be freed safely: leak it.
    if (!finalized && broken_.empty()) {
      CallGuard g;
      if (p2p_comm_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_comm_);
      MPI_Comm_free(&comm_);
    }
  }

  std::string_view Name() const override { return "mpi"; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    // CUDA-aware MPI is not assumed.
    return memory == MemoryKind::kHost && IsDefinedReduction(kind, dtype, op);
  }
  // Every collective meets in the shared-memory slots first, where each rank reads every rank's
  // fingerprint before any data moves (Meet).
  bool ChecksMismatch() const override { return shm_ != nullptr; }
  // Isend/Irecv polled with MPI_Test next to collectives on another thread (MPI_THREAD_MULTIPLE, or
  // every MPI call serialised by CallGuard when the library gives less).
  bool ConcurrentPointToPoint() const override { return true; }
  // Well under Open MPI's smallest eager limits (4 KiB with the shared-memory BTL, header included).
  std::size_t EagerPointToPointBytes() const override { return 1024; }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    // One clock read (CallStart) serves every deadline of this call (DeadlineFor) and the Work's duration.
    // (Sends and receives run concurrently with collectives: they keep their own clock.)
    const auto start = CallStart(a);
    const bool collective = a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv;
    if (collective) call_start_ = start;
    Status s;
    // The lock only once the group is broken (unusable_ is set after broken_): none per healthy call.
    if (unusable_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(state_mu_);
      s = Status::Aborted(StrCat("mpi backend of group ", group_, " is unusable: ", broken_));
    }
    if (s.ok()) s = Dispatch(a);
    // The slots this call met in were read during Dispatch (or not at all): the round ends here.
    if (collective && shm_ != nullptr) shm_->Close();
    return CompletedWork(std::move(s), a.sequence, CallDuration(a, start));
  }

  Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int key) override {
    // Collective over this communicator: every rank calls it, ranks without a color pass MPI_UNDEFINED.
    // (ProcessGroup::Split has already met every rank through the store, so nobody is missing here.)
    MPI_Comm child = MPI_COMM_NULL;
    int rc;
    {
      CallGuard g;
      rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child);
    }
    if (rc != MPI_SUCCESS) return Status::BackendError(StrCat("mpi backend: MPI_Comm_split failed: ", MpiError(rc)));
    if (child == MPI_COMM_NULL) return std::unique_ptr<Backend>();
    int r = 0, n = 0;
    {
      CallGuard g;
      MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN);
      MPI_Comm_rank(child, &r);
      MPI_Comm_size(child, &n);
    }
    if (r != context.rank || n != context.size) {
      CallGuard g;
      MPI_Comm_free(&child);
      return Status::Internal(StrCat("mpi backend: MPI_Comm_split placed this rank at ", r, "/", n,
                                     " but the process group expects ", context.rank, "/", context.size));
    }
    auto table = MpiTable(context);
    if (!table.ok()) {
      CallGuard g;
      MPI_Comm_free(&child);
      return table.status();
    }
    return std::unique_ptr<Backend>(new MpiBackend(child, r, n, context.group_name, p2p_comm_ != MPI_COMM_NULL,
                                                   shm_enabled_, spin_, std::move(*table)));
  }

  void Abort(std::string_view reason) override {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (broken_.empty()) broken_ = StrCat("aborted: ", reason);
      unusable_.store(true, std::memory_order_release);
      aborted_.store(true);
    }
    if (shm_ != nullptr) shm_->Abort(reason);  // ends a wait in the slots, and tells the peers
  }

 private:
  std::size_t Bytes(const CollectiveArgs& a, std::size_t n) const { return n * SizeOf(a.dtype); }

  Status TooLarge(const CollectiveArgs& a, std::size_t n) const {
    return Status::InvalidArgument(StrCat("mpi backend: ", ToString(a.kind), " of ", n,
                                          " elements exceeds MPI's int count limit (", INT_MAX,
                                          "); split the call or use backend gloo"));
  }

  Status Check(int rc, const CollectiveArgs& a, std::string_view call) const {
    if (rc == MPI_SUCCESS) return Status::Ok();
    return Status::BackendError(StrCat("mpi backend: ", call, " for ", ToString(a.kind), " #", a.sequence, " failed: ",
                                       MpiError(rc)));
  }

  static Clock::time_point DeadlineFrom(Clock::time_point start, const CollectiveArgs& a) {
    return start + (a.timeout.count() > 0 ? a.timeout : std::chrono::milliseconds(600'000));
  }
  // A collective's deadline, counted from when Run() started it (collectives only).
  Clock::time_point DeadlineFor(const CollectiveArgs& a) const { return DeadlineFrom(call_start_, a); }

  // Polls `reqs` until all complete, the deadline passes, or Abort() is called, pausing as Backoff
  // says (spinning for `spin_`, COMMKIT_MPI_SPIN_US).
  //
  // On failure the requests are retired (Retire): `cancellable` says whether they are point-to-point
  // (MPI can cancel those, not collectives), `keep` gives the memory a request MPI could not cancel
  // still uses.
  template <typename Keep>
  Status WaitAll(MPI_Request* reqs, int n, const CollectiveArgs& a, Clock::time_point deadline, bool cancellable,
                 Keep&& keep) {
    Backoff backoff(spin_);
    while (true) {
      int flag = 0, rc;
      {
        CallGuard g;
        rc = n == 1 ? MPI_Test(reqs, &flag, MPI_STATUS_IGNORE) : MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      }
      if (rc != MPI_SUCCESS) return Retire(reqs, n, cancellable, keep, Check(rc, a, "MPI_Test"));
      if (flag) return Status::Ok();
      if (aborted_.load())
        return Retire(reqs, n, cancellable, keep,
                      Status::Aborted(StrCat("mpi backend: ", ToString(a.kind), " #", a.sequence, " aborted")));
      if (!backoff.Pause(deadline)) return Retire(reqs, n, cancellable, keep, TimedOut(a));
    }
  }

  Status TimedOut(const CollectiveArgs& a) const {
    return Status::Timeout(StrCat("mpi backend: ", ToString(a.kind), " #", a.sequence, " on group ", group_, " (rank ",
                                  rank_, "/", size_, ") did not complete within ", a.timeout.count(), " ms"));
  }

  // The pause between two polls of a wait: none for the first kPureSpins polls (a small message
  // completes within them, and reading the clock was a visible part of an 8-byte all-reduce), then
  // spinning for `spin`, then yields, then sleeps growing to 1 ms. Spinning matters: a yield hands the
  // core to any other runnable process, and a rendezvous-protocol message needs several progress
  // rounds on both sides.
  class Backoff {
   public:
    explicit Backoff(std::chrono::microseconds spin) : spin_(spin) {}
    // After a poll that found nothing: false once `deadline` has passed.
    bool Pause(Clock::time_point deadline) {
      if (spins_++ < kPureSpins) return true;
      const auto now = Clock::now();
      if (spins_ == kPureSpins + 1) spin_until_ = now + spin_;
      if (now >= deadline) return false;
      if (now < spin_until_) return true;
      if (yields_++ < 2000) {
        std::this_thread::yield();
      } else {
        sleep_ = std::min<std::chrono::microseconds>(sleep_ + std::chrono::microseconds(20), std::chrono::microseconds(1000));
        std::this_thread::sleep_for(sleep_);
      }
      return true;
    }

   private:
    static constexpr int kPureSpins = 64;
    const std::chrono::microseconds spin_;
    Clock::time_point spin_until_{};
    int spins_ = 0, yields_ = 0;
    std::chrono::microseconds sleep_{0};
  };

  // A failed operation: the group is unusable from now on (peers may be mid-operation). Its requests
  // are cancelled where MPI can; those still pending after a bounded drain are kept, with the memory
  // they use, until they complete or the job ends (they must not write into or read from memory that
  // is freed once this call returns), and MPI_Finalize is bounded at exit (mpi_runtime.cc).
  template <typename Keep>
  Status Retire(MPI_Request* reqs, int n, bool cancellable, Keep& keep, Status s) {
    NoteFailure(s.message());
    const int left = CancelAndDrain(reqs, n, cancellable);
    if (left > 0) KeepOrphans(reqs, n, keep());
    std::lock_guard<std::mutex> lock(state_mu_);
    if (broken_.empty())
      broken_ = StrCat(s.message(), left > 0 ? StrCat("; ", left, " MPI request(s) could not be cancelled and are kept until "
                                                      "they complete or the job ends")
                                             : std::string());
    unusable_.store(true, std::memory_order_release);
    return s;
  }

  // A failed operation that left no request behind: the group is unusable from now on.
  void MarkUnusable(const Status& s) {
    NoteFailure(s.message());
    std::lock_guard<std::mutex> lock(state_mu_);
    if (broken_.empty()) broken_ = s.message();
    unusable_.store(true, std::memory_order_release);
  }

  // A single request (a send or a receive) that uses only memory the caller keeps alive past a
  // failure (or none).
  Status Complete(MPI_Request* req, const CollectiveArgs& a, bool cancellable) {
    return WaitAll(req, 1, a, DeadlineFrom(Clock::now(), a), cancellable, [] { return std::shared_ptr<void>(); });
  }


  // The algorithm layer's transport on the private communicator (mpi_collectives.cc).
  class Transport;


  // Whether this call goes over point-to-point (byte counts must fit MPI's int).
  bool UseP2p(const CollectiveArgs& a, std::size_t count) const {
    return p2p_comm_ != MPI_COMM_NULL && count * SizeOf(a.dtype) <= static_cast<std::size_t>(INT_MAX);
  }

  // The ring's scratch is kept between calls (no page faults per call) up to this size.
  static constexpr std::size_t kKeepScratchBytes = 64 << 20;

  // Runs `start` (which posts one point-to-point call on the caller's buffer) and waits for it.
  template <typename F>
  Status Post(const CollectiveArgs& a, std::string_view call, F&& start) {
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      CallGuard g;
      rc = start(&req);
    }
    COMMKIT_RETURN_IF_ERROR(Check(rc, a, call));
    return Complete(&req, a, /*cancellable=*/true);
  }

  // Owned copies of one nonblocking collective's buffers, and on failure whatever else it reads.
  struct Staged {
    std::vector<char> in, out;
    std::vector<std::vector<char>> bytes;
    std::vector<std::vector<int>> ints;
  };

  // Runs `start(send, recv, &req)`, which posts one nonblocking collective, on owned copies of `send`
  // and `recv` (`recv` copied in too: in-place forms read it) and waits for it; on success the result
  // is copied back to `recv`. MPI cannot cancel a started collective: after a timeout it may still
  // complete when the late rank arrives, and must then write into these copies, never into memory the
  // caller has freed. `scratch` and `ints`, what else the call reads, are kept with them on failure.
  // MPI_IN_PLACE and null pointers pass through.
  template <typename F>
  Status PostStaged(const CollectiveArgs& a, std::string_view call, const void* send, std::size_t send_bytes, void* recv,
                    std::size_t recv_bytes, std::vector<char>* scratch, std::initializer_list<std::vector<int>*> ints,
                    F&& start) {
    auto st = std::make_shared<Staged>();
    const void* s = send;
    if (send != nullptr && send != MPI_IN_PLACE && send_bytes > 0) {
      st->in.assign(static_cast<const char*>(send), static_cast<const char*>(send) + send_bytes);
      s = st->in.data();
    }
    void* r = recv;
    const bool copy_out = recv != nullptr && recv != MPI_IN_PLACE && recv_bytes > 0;
    if (copy_out) {
      st->out.assign(static_cast<const char*>(recv), static_cast<const char*>(recv) + recv_bytes);
      r = st->out.data();
    }
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      CallGuard g;
      rc = start(s, r, &req);
    }
    COMMKIT_RETURN_IF_ERROR(Check(rc, a, call));
    Status status = WaitAll(&req, 1, a, DeadlineFor(a), /*cancellable=*/false, [&] {
      // Moving a vector keeps its buffer where MPI points.
      if (scratch != nullptr) st->bytes.push_back(std::move(*scratch));
      for (std::vector<int>* v : ints) st->ints.push_back(std::move(*v));
      return std::static_pointer_cast<void>(st);
    });
    if (status.ok() && copy_out) std::memcpy(recv, st->out.data(), recv_bytes);
    return status;
  }

  static bool FitsInt(std::size_t n) { return n <= static_cast<std::size_t>(INT_MAX); }

  // Per-rank int counts and displacements (in elements); false when they exceed int.
  static bool CountsAndDispls(const std::vector<std::size_t>& c, std::vector<int>& counts, std::vector<int>& displs) {
    std::size_t off = 0;
    counts.clear();
    displs.clear();
    for (std::size_t n : c) {
      if (!FitsInt(n) || !FitsInt(off)) return false;
      counts.push_back(static_cast<int>(n));
      displs.push_back(static_cast<int>(off));
      off += n;
    }
    return FitsInt(off);
  }

  // Every collective of the API (mpi_collectives.cc).
  Status Dispatch(const CollectiveArgs& a);
  // Reduce-scatter(v) of two ranks on point-to-point messages, from the caller's input (no staging):
  // this rank's block is `my_count` elements at byte `my_off`, the peer's `peer_count` at `peer_off`.
  Status TwoRankReduceScatter(const CollectiveArgs& a, std::size_t my_off, std::size_t my_count, std::size_t peer_off,
                              std::size_t peer_count);
  // All-to-all(v) on point-to-point messages; `send_bytes` is the input's size (staged when in place).
  Status P2pAlltoall(const CollectiveArgs& a, const std::vector<std::size_t>& send_off,
                     const std::vector<std::size_t>& recv_off, std::size_t send_bytes);

  // Scratch and staging are kept between calls (no page faults per call) up to kKeepScratchBytes each.
  // (After a failure they have moved to the orphaned requests: empty here.)
  void TrimP2pBuffers() {
    if (p2p_scratch_.capacity() > kKeepScratchBytes) std::vector<char>().swap(p2p_scratch_);
    if (p2p_stage_.capacity() > kKeepScratchBytes) std::vector<char>().swap(p2p_stage_);
  }

  // Binomial-tree broadcast up to this size (any size at two ranks); above it MPI_Ibcast (pipelined in libnbc).
  static constexpr std::size_t kP2pBroadcastMaxBytes = 1 << 20;

  // The shared-memory transport among this group's ranks, or null (logged) when they are not all
  // on this node or a rank could not map its memory; collective over comm_ (mpi_shm_collectives.cc).
  std::unique_ptr<SlotMeeting> ConnectShm();
  // Every collective's meeting in the slots (mpi_shm_collectives.cc): this rank publishes the call's
  // fingerprint and `bytes` of `data` (scaled by `scale` unless it is 1: PREMUL_SUM), then waits for
  // every rank's, bounded by the call's deadline and Abort(). `most`: when other ranks publish more
  // than `bytes`, the most any rank does (every rank must decide alike whether the data travels in
  // the header line). Mismatch, on every rank alike, when the fingerprints differ; then no data has
  // moved and the group stays usable.
  Status Meet(const CollectiveArgs& a, const void* data, std::size_t bytes, double scale = 1, std::size_t most = 0);
  // An all-gather(v) read straight from every rank's input (SlotMeeting::ReadsGather): the meeting
  // announces this rank's input, then every rank reads every peer's block to a.recv + offsets_[q]
  // (mpi_shm_collectives.cc).
  Status ReadGather(const CollectiveArgs& a);
  // The end of a call read from the peers' buffers (SlotMeeting::ReadBroadcast, ReadGather), given
  // how the reads and the wait for the other readers went: counted as single_copy, or the group is
  // unusable.
  Status AfterPeerReads(Status s);
  // Whether `bytes` of one rank's data fit a slot.
  bool ShmFits(std::size_t bytes) const { return shm_ != nullptr && shm_->Fits(bytes); }
  // All-gather(v) and broadcast through the slots (SlotMeeting::Gathers).
  bool ShmGathers(std::size_t bytes) const { return shm_ != nullptr && shm_->Gathers(bytes); }

  std::unique_ptr<SlotMeeting> shm_;  // a round a collective opened in Meet ends in Run()
  bool shm_enabled_ = false;     // this group's children try the slots too

  MPI_Comm comm_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // point-to-point collectives (COMMKIT_MPI_COLLECTIVES=auto)
  std::vector<char> p2p_scratch_;      // collectives run one at a time per backend
  std::vector<char> p2p_stage_;        // a staged input (reduce-scatter, in-place all-to-all)
  std::vector<MPI_Request> p2p_reqs_;  // one exchange's requests, kept between calls (no allocation)
  std::vector<std::size_t> offsets_;   // ReadGather's block offsets, kept between calls
  Clock::time_point call_start_{};     // when the running collective's Run() began
  const int rank_;
  const int size_;
  const std::string group_;
  std::mutex state_mu_;
  std::string broken_;  // why the backend is unusable (empty: usable)
  std::atomic<bool> aborted_{false};
  std::atomic<bool> unusable_{false};  // broken_ is set
  const std::chrono::microseconds spin_;  // pure MPI_Test spinning before yielding (WaitAll)
  const tune::Table table_;                // which all-reduce algorithm runs at each size
};

}  // namespace commkit::comm::mpi
