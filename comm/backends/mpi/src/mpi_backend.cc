// The MPI backend: every collective as a nonblocking MPI call (MPI-3) polled until its deadline, so a
// rank that never arrives turns into a timeout the process group can diagnose instead of a hang.
// After a failure, what MPI can cancel is cancelled and what it cannot (started collectives, sends)
// keeps owned memory until it completes or the job ends (mpi_runtime.h). mpi.h is included only in
// this backend's sources.
#include "commkit/comm_mpi/mpi_backend.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "mpi_runtime.h"
#include "mpi_types.h"
#include "p2p_collectives.h"

namespace commkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using mpi::CallGuard;
using mpi::EnsureInitialized;
using mpi::MpiError;
using mpi::BaseKind;
using mpi::MpiOp;
using mpi::MpiType;
using mpi::Rt;

// Which launcher started us (empty when none did).
std::string Launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                          "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return var;
  }
  return {};
}

// The group's selection table (tuning.h): which all-reduce algorithm runs at each size.
Result<tune::Table> MpiTable(const BackendContext& ctx) {
  tune::TableOptions options;
  options.store = ctx.store;
  options.rank = ctx.rank;
  options.timeout = ctx.timeout;
  auto table = tune::Table::ForGroup("mpi", {ctx.size, ctx.size, 1}, options);
  if (!table.ok()) return table.status().WithContext(StrCat("mpi backend, group ", ctx.group_name));
  return table;
}

// ---- the backend -----------------------------------------------------------------------------------

class MpiBackend final : public Backend {
 public:
  // `p2p`: run all-reduce, broadcast and barrier on point-to-point messages over a private duplicate
  // of `comm` (see P2pTransport below) instead of MPI's nonblocking collectives. Collective over `comm`.
  MpiBackend(MPI_Comm comm, int rank, int size, std::string group, bool p2p, std::chrono::microseconds spin,
             tune::Table table)
      : comm_(comm), rank_(rank), size_(size), group_(std::move(group)), spin_(spin), table_(std::move(table)) {
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
  // Isend/Irecv polled with MPI_Test next to collectives on another thread (MPI_THREAD_MULTIPLE, or
  // every MPI call serialised by CallGuard when the library gives less).
  bool ConcurrentPointToPoint() const override { return true; }
  // Well under Open MPI's smallest eager limits (4 KiB with the shared-memory BTL, header included).
  std::size_t EagerPointToPointBytes() const override { return 1024; }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    auto start = Clock::now();
    Status s;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (!broken_.empty()) s = Status::Aborted(StrCat("mpi backend of group ", group_, " is unusable: ", broken_));
    }
    if (s.ok()) s = Dispatch(a);
    return CompletedWork(std::move(s), a.sequence, Clock::now() - start);
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
    return std::unique_ptr<Backend>(
        new MpiBackend(child, r, n, context.group_name, p2p_comm_ != MPI_COMM_NULL, spin_, std::move(*table)));
  }

  void Abort(std::string_view reason) override {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (broken_.empty()) broken_ = StrCat("aborted: ", reason);
    aborted_.store(true);
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

  Clock::time_point DeadlineFor(const CollectiveArgs& a) const {
    return Clock::now() + (a.timeout.count() > 0 ? a.timeout : milliseconds(600'000));
  }

  // Polls `reqs` until all complete, the deadline passes, or Abort() is called. It spins on MPI_Test
  // alone for `spin_` (COMMKIT_MPI_SPIN_US), then yields between polls, then sleeps with a growing
  // pause up to 1 ms. Spinning matters: a yield hands the core to any other runnable process, and a
  // rendezvous-protocol message needs several progress rounds on both sides.
  //
  // On failure the requests are retired (Retire): `cancellable` says whether they are point-to-point
  // (MPI can cancel those, not collectives), `keep` gives the memory a request MPI could not cancel
  // still uses.
  template <typename Keep>
  Status WaitAll(MPI_Request* reqs, int n, const CollectiveArgs& a, Clock::time_point deadline, bool cancellable,
                 Keep&& keep) {
    auto sleep = std::chrono::microseconds(0);
    const auto spin_until = Clock::now() + spin_;
    for (int spins = 0, yields = 0;; ++spins) {
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
      if (spins < kPureSpins) continue;
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string what = StrCat(ToString(a.kind), " #", a.sequence, " on group ", group_, " (rank ", rank_, "/",
                                  size_, ") did not complete within ", a.timeout.count(), " ms");
        return Retire(reqs, n, cancellable, keep, Status::Timeout(StrCat("mpi backend: ", what)));
      }
      if (now < spin_until) continue;
      if (yields++ < 2000) {
        std::this_thread::yield();
      } else {
        sleep = std::min<std::chrono::microseconds>(sleep + std::chrono::microseconds(20), std::chrono::microseconds(1000));
        std::this_thread::sleep_for(sleep);
      }
    }
  }
  static constexpr int kPureSpins = 64;

  // A failed operation: the group is unusable from now on (peers may be mid-operation). Its requests
  // are cancelled where MPI can; those still pending after a bounded drain are kept, with the memory
  // they use, until they complete or the job ends (they must not write into or read from memory that
  // is freed once this call returns), and MPI_Finalize is bounded at exit (mpi_runtime.cc).
  template <typename Keep>
  Status Retire(MPI_Request* reqs, int n, bool cancellable, Keep& keep, Status s) {
    mpi::NoteFailure(s.message());
    const int left = mpi::CancelAndDrain(reqs, n, cancellable);
    if (left > 0) mpi::KeepOrphans(reqs, n, keep());
    std::lock_guard<std::mutex> lock(state_mu_);
    if (broken_.empty())
      broken_ = StrCat(s.message(), left > 0 ? StrCat("; ", left, " MPI request(s) could not be cancelled and are kept until "
                                                      "they complete or the job ends")
                                             : std::string());
    return s;
  }

  // A single request that uses only memory the caller keeps alive past a failure (or none).
  Status Complete(MPI_Request* req, const CollectiveArgs& a, bool cancellable) {
    return WaitAll(req, 1, a, DeadlineFor(a), cancellable, [] { return std::shared_ptr<void>(); });
  }

  // Point-to-point steps for p2p_collectives.h on the private communicator, each polled to the
  // collective's deadline (one deadline for the whole collective, not per step).
  class Transport final : public P2pTransport {
   public:
    Transport(MpiBackend& b, const CollectiveArgs& a) : b_(b), a_(a), deadline_(b.DeadlineFor(a)) {}
    Status SendRecv(int to, const void* send, std::size_t send_bytes, int from, void* recv,
                    std::size_t recv_bytes) override {
      // Messages up to kSegmentedMax go as segments under Open MPI's shared-memory eager limit (4 KiB
      // with header): eager sends need no rendezvous round trip. Larger ones go whole (single copy).
      MPI_Request reqs[2 * kMaxSegments];
      int n = 0, rc = MPI_SUCCESS;
      const char* call = "MPI_Irecv";
      auto post = [&](bool is_send, int peer, char* p, std::size_t bytes) {
        const std::size_t seg = bytes <= kSegmentedMax ? kSegmentBytes : bytes;
        std::size_t off = 0;
        do {
          const std::size_t len = std::min(seg, bytes - off);
          rc = is_send ? MPI_Isend(p + off, static_cast<int>(len), MPI_BYTE, peer, kTag, b_.p2p_comm_, &reqs[n])
                       : MPI_Irecv(p + off, static_cast<int>(len), MPI_BYTE, peer, kTag, b_.p2p_comm_, &reqs[n]);
          if (rc != MPI_SUCCESS) return;
          ++n;
          off += len;
        } while (off < bytes);
      };
      {
        CallGuard g;
        if (from >= 0) post(false, from, static_cast<char*>(recv), recv_bytes);
        if (rc == MPI_SUCCESS && to >= 0) {
          call = "MPI_Isend";
          post(true, to, const_cast<char*>(static_cast<const char*>(send)), send_bytes);
        }
      }
      if (rc != MPI_SUCCESS) {
        // Those already posted must not outlive this call either.
        return b_.Retire(reqs, n, true, keep_, b_.Check(rc, a_, call));
      }
      return b_.WaitAll(reqs, n, a_, deadline_, /*cancellable=*/true, keep_);
    }

   private:
    static constexpr int kTag = 0;
    static constexpr std::size_t kSegmentBytes = 4096 - 128;
    static constexpr std::size_t kSegmentedMax = 8 * kSegmentBytes;
    static constexpr int kMaxSegments = 8;
    MpiBackend& b_;
    const CollectiveArgs& a_;
    Clock::time_point deadline_;
    // A receive MPI could not cancel may still write into the ring's scratch: it leaves the backend
    // with the request. (The caller's own buffers are the caller's; see docs/mpi-backend.md.)
    std::function<std::shared_ptr<void>()> keep_ = [this] {
      return std::static_pointer_cast<void>(std::make_shared<std::vector<char>>(std::move(b_.p2p_scratch_)));
    };
  };

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

  Status Dispatch(const CollectiveArgs& a) {
    const std::size_t p = static_cast<std::size_t>(size_);
    const MPI_Datatype type = MpiType(a.dtype);
    const int n = static_cast<int>(std::min<std::size_t>(a.count, INT_MAX));
    const bool v_kind = a.kind == CollectiveKind::kAllgatherv || a.kind == CollectiveKind::kReduceScatterV ||
                        a.kind == CollectiveKind::kAlltoallv;
    if (!v_kind && !FitsInt(a.count * p)) return TooLarge(a, a.count * p);
    const MPI_Op op = IsReduction(a.kind) ? MpiOp(a.dtype, a.op.kind) : MPI_OP_NULL;
    const bool premul = IsReduction(a.kind) && a.op.kind == ReduceKind::kPreMulSum;
    const bool avg = IsReduction(a.kind) && a.op.kind == ReduceKind::kAvg;
    std::vector<char> scratch;
    // A scaled private copy of `src` (n elements) for PREMUL_SUM.
    auto scaled = [&](const void* src, std::size_t elems) -> const void* {
      scratch.assign(static_cast<const char*>(src), static_cast<const char*>(src) + Bytes(a, elems));
      ScaleInPlace(a.dtype, scratch.data(), elems, a.op.scalar);
      return scratch.data();
    };

    switch (a.kind) {
      case CollectiveKind::kAllreduce: {
        if (a.count == 0) return Status::Ok();
        const void* in = a.send;
        // Recursive doubling, the ring (and its segment) or the library's own: the selection table's choice.
        const tune::Choice choice = table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, Bytes(a, a.count));
        if (UseP2p(a, a.count) && choice.algorithm != tune::Algorithm::kLibrary) {
          Transport t(*this, a);
          P2pAllreduceArgs args;
          args.ring_min_bytes = choice.algorithm == tune::Algorithm::kRing ? 0 : tune::kNoLimit;
          if (choice.params.segment_bytes != 0) args.segment_bytes = choice.params.segment_bytes;
          tune::NoteRun("mpi", choice.algorithm == tune::Algorithm::kRing && a.count >= static_cast<std::size_t>(size_)
                                   ? tune::Algorithm::kRing
                                   : tune::Algorithm::kRecursiveDoubling);
          if (premul) {
            if (in != nullptr && in != a.recv) std::memcpy(a.recv, in, Bytes(a, a.count));
            ScaleInPlace(a.dtype, a.recv, a.count, a.op.scalar);
          } else if (in != a.recv) {
            args.in = in;  // out of place: the ring reads the input directly, no copy
          }
          args.buf = a.recv;
          args.count = a.count;
          args.elem_size = SizeOf(a.dtype);
          args.reduce = GetReduceFunction(a.dtype, BaseKind(a.op.kind));
          Status st = P2pAllreduce(t, rank_, size_, args, p2p_scratch_);
          if (p2p_scratch_.size() > kKeepScratchBytes) std::vector<char>().swap(p2p_scratch_);
          COMMKIT_RETURN_IF_ERROR(st);
        } else {
          tune::NoteRun("mpi", tune::Algorithm::kLibrary);
          if (in != nullptr && in != a.recv) std::memcpy(a.recv, in, Bytes(a, a.count));
          if (premul) ScaleInPlace(a.dtype, a.recv, a.count, a.op.scalar);
          COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Iallreduce", nullptr, 0, a.recv, Bytes(a, a.count), nullptr, {},
                                             [&](const void*, void* recv, MPI_Request* r) {
                                               return MPI_Iallreduce(MPI_IN_PLACE, recv, n, type, op, comm_, r);
                                             }));
        }
        if (avg) DivideInPlace(a.dtype, a.recv, a.count, size_);
        return Status::Ok();
      }
      case CollectiveKind::kBroadcast: {
        if (a.count == 0) return Status::Ok();
        if (UseP2p(a, a.count) && Bytes(a, a.count) <= kP2pBroadcastMaxBytes) {
          Transport t(*this, a);
          return P2pBroadcast(t, rank_, size_, a.root, a.recv, Bytes(a, a.count));
        }
        return PostStaged(a, "MPI_Ibcast", nullptr, 0, a.recv, Bytes(a, a.count), nullptr, {},
                          [&](const void*, void* buf, MPI_Request* r) { return MPI_Ibcast(buf, n, type, a.root, comm_, r); });
      }
      case CollectiveKind::kReduce: {
        if (a.count == 0) return Status::Ok();
        const void* in = a.send != nullptr ? a.send : a.recv;
        if (premul) in = scaled(in, a.count);
        const bool root = rank_ == a.root;
        const void* send = (root && in == a.recv) ? MPI_IN_PLACE : in;
        COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Ireduce", send, Bytes(a, a.count), root ? a.recv : nullptr,
                                           Bytes(a, a.count), &scratch, {}, [&](const void* s, void* recv, MPI_Request* r) {
                                             return MPI_Ireduce(s, recv, n, type, op, a.root, comm_, r);
                                           }));
        if (avg && root) DivideInPlace(a.dtype, a.recv, a.count, size_);
        return Status::Ok();
      }
      case CollectiveKind::kAllgather: {
        if (a.count == 0) return Status::Ok();
        char* mine = static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_));
        const void* send = (a.send == nullptr || a.send == a.recv || a.send == mine) ? MPI_IN_PLACE : a.send;
        if (send == MPI_IN_PLACE && a.send == a.recv && rank_ != 0) std::memmove(mine, a.recv, Bytes(a, a.count));
        return PostStaged(a, "MPI_Iallgather", send, Bytes(a, a.count), a.recv, Bytes(a, a.count * p), nullptr, {},
                          [&](const void* s, void* recv, MPI_Request* r) {
                            return MPI_Iallgather(s, n, type, recv, n, type, comm_, r);
                          });
      }
      case CollectiveKind::kAllgatherv: {
        std::vector<int> counts, displs;
        if (!CountsAndDispls(a.counts, counts, displs))
          return TooLarge(a, std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0}));
        char* mine = static_cast<char*>(a.recv) + Bytes(a, static_cast<std::size_t>(displs[rank_]));
        const void* send = (a.send == nullptr || a.send == mine) ? MPI_IN_PLACE : a.send;
        const std::size_t total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        return PostStaged(a, "MPI_Iallgatherv", send, Bytes(a, a.counts[rank_]), a.recv, Bytes(a, total), nullptr,
                          {&counts, &displs}, [&](const void* s, void* recv, MPI_Request* r) {
                            return MPI_Iallgatherv(s, counts[rank_], type, recv, counts.data(), displs.data(), type,
                                                   comm_, r);
                          });
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kReduceScatterV: {
        std::vector<std::size_t> sizes =
            a.kind == CollectiveKind::kReduceScatter ? std::vector<std::size_t>(p, a.count) : a.counts;
        std::vector<int> counts, displs;
        std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
        if (!CountsAndDispls(sizes, counts, displs)) return TooLarge(a, total);
        if (a.send == nullptr && total > 0)
          return Status::InvalidArgument(StrCat("mpi backend: ", ToString(a.kind), " needs a send buffer of ", total,
                                                " elements (the result is smaller than the input)"));
        const void* in = a.send;
        if (premul) {
          in = scaled(in, total);
        } else if (in == a.recv && total > 0) {
          // MPI forbids aliased send and receive buffers: reduce from a copy.
          scratch.assign(static_cast<const char*>(a.send), static_cast<const char*>(a.send) + Bytes(a, total));
          in = scratch.data();
        }
        COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Ireduce_scatter", in, Bytes(a, total), a.recv,
                                           Bytes(a, sizes[rank_]), &scratch, {&counts, &displs},
                                           [&](const void* s, void* recv, MPI_Request* r) {
                                             return MPI_Ireduce_scatter(s, recv, counts.data(), type, op, comm_, r);
                                           }));
        if (avg) DivideInPlace(a.dtype, a.recv, sizes[rank_], size_);
        return Status::Ok();
      }
      case CollectiveKind::kAlltoall: {
        if (a.count == 0) return Status::Ok();
        const void* in = a.send;
        if (in == nullptr || in == a.recv) {
          scratch.assign(static_cast<const char*>(a.recv), static_cast<const char*>(a.recv) + Bytes(a, a.count * p));
          in = scratch.data();
        }
        return PostStaged(a, "MPI_Ialltoall", in, Bytes(a, a.count * p), a.recv, Bytes(a, a.count * p), &scratch, {},
                          [&](const void* s, void* recv, MPI_Request* r) {
                            return MPI_Ialltoall(s, n, type, recv, n, type, comm_, r);
                          });
      }
      case CollectiveKind::kAlltoallv: {
        std::vector<int> sc, sd, rc, rd;
        std::size_t send_total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        std::size_t recv_total = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), std::size_t{0});
        if (!CountsAndDispls(a.counts, sc, sd)) return TooLarge(a, send_total);
        if (!CountsAndDispls(a.recv_counts, rc, rd)) return TooLarge(a, recv_total);
        const void* in = a.send;
        if (in == nullptr || in == a.recv) {
          if (send_total > recv_total)
            return Status::InvalidArgument(StrCat("mpi backend: in-place alltoallv sends ", send_total,
                                                  " elements but the buffer holds ", recv_total));
          scratch.assign(static_cast<const char*>(a.recv), static_cast<const char*>(a.recv) + Bytes(a, send_total));
          in = scratch.data();
        }
        return PostStaged(a, "MPI_Ialltoallv", in, Bytes(a, send_total), a.recv, Bytes(a, recv_total), &scratch,
                          {&sc, &sd, &rc, &rd}, [&](const void* s, void* recv, MPI_Request* r) {
                            return MPI_Ialltoallv(s, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type,
                                                  comm_, r);
                          });
      }
      case CollectiveKind::kGather: {
        if (a.count == 0) return Status::Ok();
        const bool root = rank_ == a.root;
        char* slot = root ? static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_)) : nullptr;
        const void* send = (root && a.send == slot) ? MPI_IN_PLACE : a.send;
        return PostStaged(a, "MPI_Igather", send, Bytes(a, a.count), root ? a.recv : nullptr, Bytes(a, a.count * p),
                          nullptr, {}, [&](const void* s, void* recv, MPI_Request* r) {
                            return MPI_Igather(s, n, type, recv, n, type, a.root, comm_, r);
                          });
      }
      case CollectiveKind::kScatter: {
        if (a.count == 0) return Status::Ok();
        const bool root = rank_ == a.root;
        const char* slot = root ? static_cast<const char*>(a.send) + Bytes(a, a.count * static_cast<std::size_t>(rank_))
                                : nullptr;
        void* recv = (root && a.recv == slot) ? MPI_IN_PLACE : a.recv;
        return PostStaged(a, "MPI_Iscatter", root ? a.send : nullptr, Bytes(a, a.count * p), recv, Bytes(a, a.count),
                          nullptr, {}, [&](const void* s, void* out, MPI_Request* r) {
                            return MPI_Iscatter(s, n, type, out, n, type, a.root, comm_, r);
                          });
      }
      case CollectiveKind::kBarrier:
        if (p2p_comm_ != MPI_COMM_NULL) {
          Transport t(*this, a);
          return P2pBarrier(t, rank_, size_);
        }
        return PostStaged(a, "MPI_Ibarrier", nullptr, 0, nullptr, 0, nullptr, {},
                          [&](const void*, void*, MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
      case CollectiveKind::kSend:
      case CollectiveKind::kRecv: {
        if (!FitsInt(a.count)) return TooLarge(a, a.count);
        if (a.tag > Rt().tag_ub)
          return Status::InvalidArgument(StrCat("mpi backend: tag ", a.tag, " exceeds MPI_TAG_UB (", Rt().tag_ub, ")"));
        if (a.kind == CollectiveKind::kSend)
          return Post(a, "MPI_Isend",
                      [&](MPI_Request* r) { return MPI_Isend(a.send, n, type, a.peer, a.tag, comm_, r); });
        return Post(a, "MPI_Irecv", [&](MPI_Request* r) { return MPI_Irecv(a.recv, n, type, a.peer, a.tag, comm_, r); });
      }
    }
    return Status::Internal("mpi backend: unknown collective");
  }

  // Binomial-tree broadcast up to this size; above it MPI_Ibcast (pipelined in libnbc).
  static constexpr std::size_t kP2pBroadcastMaxBytes = 1 << 20;

  MPI_Comm comm_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // point-to-point collectives (COMMKIT_MPI_COLLECTIVES=auto)
  std::vector<char> p2p_scratch_;      // collectives run one at a time per backend
  const int rank_;
  const int size_;
  const std::string group_;
  std::mutex state_mu_;
  std::string broken_;  // why the backend is unusable (empty: usable)
  std::atomic<bool> aborted_{false};
  const std::chrono::microseconds spin_;  // pure MPI_Test spinning before yielding (WaitAll)
  const tune::Table table_;
};

// How long a wait spins on MPI_Test before it starts yielding the core (COMMKIT_MPI_SPIN_US).
constexpr std::int64_t kDefaultSpinUs = 100;

std::string NotLaunchedReason() {
  return "not launched by mpirun/srun (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK is set); start the job "
         "with `mpirun -np N prog` (as root add --allow-run-as-root, more ranks than cores --oversubscribe) or "
         "`srun --mpi=pmix`, set COMMKIT_MPI_SINGLETON=1 for a 1-rank run without a launcher, or use backend gloo";
}

bool SingletonAllowed() {
  const char* v = std::getenv("COMMKIT_MPI_SINGLETON");
  return v != nullptr && std::string_view(v) == "1";
}

Result<std::unique_ptr<Backend>> CreateMpiBackend(const BackendContext& ctx) {
  if (Launcher().empty() && !SingletonAllowed()) return Status::Unavailable(StrCat("mpi backend: ", NotLaunchedReason()));
  // auto: all-reduce, broadcast (<= 1 MiB) and barrier on point-to-point messages; nbc: every
  // collective as MPI's nonblocking collective (libnbc in Open MPI).
  auto collectives_env = EnvChoice("COMMKIT_MPI_COLLECTIVES", {"auto", "nbc"});
  if (!collectives_env.ok())
    return collectives_env.status().WithContext(
        "mpi backend: COMMKIT_MPI_COLLECTIVES selects how collectives run");
  std::optional<std::string> collectives = collectives_env->value_or("auto");
  auto spin_us = EnvIntOr("COMMKIT_MPI_SPIN_US", kDefaultSpinUs, 0, 10'000'000);
  if (!spin_us.ok()) return spin_us.status().WithContext("mpi backend: COMMKIT_MPI_SPIN_US is how long a wait spins");
  COMMKIT_RETURN_IF_ERROR(EnsureInitialized());
  int world_rank = 0, world_size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  int rc;
  {
    CallGuard g;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  if (ctx.rank != world_rank || ctx.size != world_size)
    return Status::InvalidArgument(StrCat("mpi backend: the process group was created as rank ", ctx.rank, " of ",
                                          ctx.size, " but MPI_COMM_WORLD has this process as rank ", world_rank, " of ",
                                          world_size, "; create the group with MPI's rank and size "
                                          "(ProcessGroup::FromEnvironment reads them from mpirun) and use Split() for sub-groups"));
  {
    CallGuard g;
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);  // a private communicator per group: no interference with the app
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  if (rc != MPI_SUCCESS) return Status::BackendError(StrCat("mpi backend: MPI_Comm_dup failed: ", MpiError(rc)));
  auto table = MpiTable(ctx);
  if (!table.ok()) {
    CallGuard g;
    MPI_Comm_free(&comm);
    return table.status();
  }
  return std::unique_ptr<Backend>(new MpiBackend(comm, world_rank, world_size, ctx.group_name, *collectives == "auto",
                                                 std::chrono::microseconds(*spin_us), std::move(*table)));
}

}  // namespace

BackendInfo MpiBackendInfo() {
  BackendInfo info;
  info.name = "mpi";
  info.memory = MemoryKind::kHost;
  std::string launcher = Launcher();
  info.available = !launcher.empty() || SingletonAllowed();
  if (!info.available) info.reason = NotLaunchedReason();
  info.create = &CreateMpiBackend;
  return info;
}

}  // namespace commkit

extern "C" __attribute__((visibility("default"))) void commkit_register_mpi_backend(commkit::Registry* registry) {
  registry->Register(commkit::MpiBackendInfo());
}
