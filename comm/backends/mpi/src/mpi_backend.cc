// The MPI backend: every collective as a nonblocking MPI call (MPI-3) polled until its deadline, so a
// rank that never arrives turns into a timeout the process group can diagnose instead of a hang.
// mpi.h is included only here.
#include "commkit/comm_mpi/mpi_backend.h"

// The C API only: Open MPI's mpi.h otherwise pulls in its deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "p2p_collectives.h"

namespace commkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- process-wide MPI state ------------------------------------------------------------------------

struct Runtime {
  std::once_flag once;
  Status init_status;
  bool initialized_by_us = false;
  bool serialise = false;  // the library granted less than MPI_THREAD_MULTIPLE
  std::mutex mu;           // held around every MPI call when serialise
  int tag_ub = 32767;
};

Runtime& Rt() {
  static Runtime* rt = new Runtime();  // never destroyed: used from atexit
  return *rt;
}

// Held around each MPI call: a no-op with MPI_THREAD_MULTIPLE, the process-wide lock otherwise.
class CallGuard {
 public:
  CallGuard() : lock_(Rt().mu, std::defer_lock) {
    if (Rt().serialise) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return StrCat("MPI error ", rc);
  return StrCat(std::string(text, static_cast<std::size_t>(len)), " (MPI error ", rc, ")");
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string_view ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

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
      std::atexit(&FinalizeAtExit);
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

// Which launcher started us (empty when none did).
std::string Launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                          "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return var;
  }
  return {};
}

// ---- types and reductions --------------------------------------------------------------------------

MPI_Datatype MpiType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;  // moved as bits, reduced by our own MPI_Op
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

// The kind MPI actually reduces with: AVG and PREMUL_SUM are SUMs around host scaling steps.
ReduceKind BaseKind(ReduceKind k) {
  return (k == ReduceKind::kAvg || k == ReduceKind::kPreMulSum) ? ReduceKind::kSum : k;
}

// f16 / bf16 reductions: user-defined MPI_Ops computing in f32 with the shared host kernels.
template <int D, int K>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceFunction fn = GetReduceFunction(static_cast<DataType>(D), static_cast<ReduceKind>(K));
  fn(inout, in, inout, static_cast<std::size_t>(*len));
}

constexpr int kF16 = static_cast<int>(DataType::kFloat16);
constexpr int kBF16 = static_cast<int>(DataType::kBFloat16);
constexpr int kSum = static_cast<int>(ReduceKind::kSum);
constexpr int kProd = static_cast<int>(ReduceKind::kProd);
constexpr int kMin = static_cast<int>(ReduceKind::kMin);
constexpr int kMax = static_cast<int>(ReduceKind::kMax);

MPI_Op HalfOp(DataType t, ReduceKind k) {
  static MPI_Op ops[2][4];
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_User_function* fns[2][4] = {
        {&HalfReduce<kF16, kSum>, &HalfReduce<kF16, kProd>, &HalfReduce<kF16, kMin>, &HalfReduce<kF16, kMax>},
        {&HalfReduce<kBF16, kSum>, &HalfReduce<kBF16, kProd>, &HalfReduce<kBF16, kMin>, &HalfReduce<kBF16, kMax>}};
    CallGuard g;
    for (int d = 0; d < 2; ++d)
      for (int k = 0; k < 4; ++k) MPI_Op_create(fns[d][k], /*commute=*/1, &ops[d][k]);
  });
  int d = t == DataType::kFloat16 ? 0 : 1;
  switch (k) {
    case ReduceKind::kProd: return ops[d][1];
    case ReduceKind::kMin: return ops[d][2];
    case ReduceKind::kMax: return ops[d][3];
    default: return ops[d][0];
  }
}

MPI_Op MpiOp(DataType t, ReduceKind kind) {
  ReduceKind k = BaseKind(kind);
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) return HalfOp(t, k);
  switch (k) {
    case ReduceKind::kProd: return MPI_PROD;
    case ReduceKind::kMin: return MPI_MIN;
    case ReduceKind::kMax: return MPI_MAX;
    case ReduceKind::kBand: return MPI_BAND;
    case ReduceKind::kBor: return MPI_BOR;
    case ReduceKind::kBxor: return MPI_BXOR;
    default: return MPI_SUM;
  }
}

// ---- the backend -----------------------------------------------------------------------------------

class MpiBackend final : public Backend {
 public:
  // `p2p`: run all-reduce, broadcast and barrier on point-to-point messages over a private duplicate
  // of `comm` (see P2pTransport below) instead of MPI's nonblocking collectives. Collective over `comm`.
  MpiBackend(MPI_Comm comm, int rank, int size, std::string group, bool p2p, std::chrono::microseconds spin)
      : comm_(comm), rank_(rank), size_(size), group_(std::move(group)), spin_(spin) {
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
    return std::unique_ptr<Backend>(new MpiBackend(child, r, n, context.group_name, p2p_comm_ != MPI_COMM_NULL, spin_));
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
  Status WaitAll(MPI_Request* reqs, int n, const CollectiveArgs& a, Clock::time_point deadline) {
    auto sleep = std::chrono::microseconds(0);
    const auto spin_until = Clock::now() + spin_;
    for (int spins = 0, yields = 0;; ++spins) {
      int flag = 0, rc;
      {
        CallGuard g;
        rc = n == 1 ? MPI_Test(reqs, &flag, MPI_STATUS_IGNORE) : MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      }
      if (rc != MPI_SUCCESS) return Check(rc, a, "MPI_Test");
      if (flag) return Status::Ok();
      if (aborted_.load()) return Status::Aborted(StrCat("mpi backend: ", ToString(a.kind), " #", a.sequence, " aborted"));
      if (spins < kPureSpins) continue;
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string what = StrCat(ToString(a.kind), " #", a.sequence, " on group ", group_, " (rank ", rank_, "/",
                                  size_, ") did not complete within ", a.timeout.count(), " ms");
        std::lock_guard<std::mutex> lock(state_mu_);
        broken_ = StrCat(what, "; MPI cannot cancel a started collective, so this group cannot be used again");
        return Status::Timeout(StrCat("mpi backend: ", what));
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

  Status Complete(MPI_Request* req, const CollectiveArgs& a) { return WaitAll(req, 1, a, DeadlineFor(a)); }

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
      if (rc != MPI_SUCCESS) return b_.Check(rc, a_, call);
      return b_.WaitAll(reqs, n, a_, deadline_);
    }

   private:
    static constexpr int kTag = 0;
    static constexpr std::size_t kSegmentBytes = 4096 - 128;
    static constexpr std::size_t kSegmentedMax = 8 * kSegmentBytes;
    static constexpr int kMaxSegments = 8;
    MpiBackend& b_;
    const CollectiveArgs& a_;
    Clock::time_point deadline_;
  };

  // Whether this call goes over point-to-point (byte counts must fit MPI's int).
  bool UseP2p(const CollectiveArgs& a, std::size_t count) const {
    return p2p_comm_ != MPI_COMM_NULL && count * SizeOf(a.dtype) <= static_cast<std::size_t>(INT_MAX);
  }

  // The ring's scratch is kept between calls (no page faults per call) up to this size.
  static constexpr std::size_t kKeepScratchBytes = 64 << 20;

  // Runs `start` (which posts one nonblocking call) and waits for it.
  template <typename F>
  Status Post(const CollectiveArgs& a, std::string_view call, F&& start) {
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      CallGuard g;
      rc = start(&req);
    }
    COMMKIT_RETURN_IF_ERROR(Check(rc, a, call));
    return Complete(&req, a);
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
        if (UseP2p(a, a.count)) {
          Transport t(*this, a);
          P2pAllreduceArgs args;
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
          if (in != nullptr && in != a.recv) std::memcpy(a.recv, in, Bytes(a, a.count));
          if (premul) ScaleInPlace(a.dtype, a.recv, a.count, a.op.scalar);
          COMMKIT_RETURN_IF_ERROR(Post(a, "MPI_Iallreduce", [&](MPI_Request* r) {
            return MPI_Iallreduce(MPI_IN_PLACE, a.recv, n, type, op, comm_, r);
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
        return Post(a, "MPI_Ibcast", [&](MPI_Request* r) { return MPI_Ibcast(a.recv, n, type, a.root, comm_, r); });
      }
      case CollectiveKind::kReduce: {
        if (a.count == 0) return Status::Ok();
        const void* in = a.send != nullptr ? a.send : a.recv;
        if (premul) in = scaled(in, a.count);
        const bool root = rank_ == a.root;
        const void* send = (root && in == a.recv) ? MPI_IN_PLACE : in;
        COMMKIT_RETURN_IF_ERROR(Post(a, "MPI_Ireduce", [&](MPI_Request* r) {
          return MPI_Ireduce(send, root ? a.recv : nullptr, n, type, op, a.root, comm_, r);
        }));
        if (avg && root) DivideInPlace(a.dtype, a.recv, a.count, size_);
        return Status::Ok();
      }
      case CollectiveKind::kAllgather: {
        if (a.count == 0) return Status::Ok();
        char* mine = static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_));
        const void* send = (a.send == nullptr || a.send == a.recv || a.send == mine) ? MPI_IN_PLACE : a.send;
        if (send == MPI_IN_PLACE && a.send == a.recv && rank_ != 0) std::memmove(mine, a.recv, Bytes(a, a.count));
        return Post(a, "MPI_Iallgather",
                    [&](MPI_Request* r) { return MPI_Iallgather(send, n, type, a.recv, n, type, comm_, r); });
      }
      case CollectiveKind::kAllgatherv: {
        std::vector<int> counts, displs;
        if (!CountsAndDispls(a.counts, counts, displs))
          return TooLarge(a, std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0}));
        char* mine = static_cast<char*>(a.recv) + Bytes(a, static_cast<std::size_t>(displs[rank_]));
        const void* send = (a.send == nullptr || a.send == mine) ? MPI_IN_PLACE : a.send;
        return Post(a, "MPI_Iallgatherv", [&](MPI_Request* r) {
          return MPI_Iallgatherv(send, counts[rank_], type, a.recv, counts.data(), displs.data(), type, comm_, r);
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
        COMMKIT_RETURN_IF_ERROR(Post(a, "MPI_Ireduce_scatter", [&](MPI_Request* r) {
          return MPI_Ireduce_scatter(in, a.recv, counts.data(), type, op, comm_, r);
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
        return Post(a, "MPI_Ialltoall",
                    [&](MPI_Request* r) { return MPI_Ialltoall(in, n, type, a.recv, n, type, comm_, r); });
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
        return Post(a, "MPI_Ialltoallv", [&](MPI_Request* r) {
          return MPI_Ialltoallv(in, sc.data(), sd.data(), type, a.recv, rc.data(), rd.data(), type, comm_, r);
        });
      }
      case CollectiveKind::kGather: {
        if (a.count == 0) return Status::Ok();
        const bool root = rank_ == a.root;
        char* slot = root ? static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_)) : nullptr;
        const void* send = (root && a.send == slot) ? MPI_IN_PLACE : a.send;
        return Post(a, "MPI_Igather", [&](MPI_Request* r) {
          return MPI_Igather(send, n, type, root ? a.recv : nullptr, n, type, a.root, comm_, r);
        });
      }
      case CollectiveKind::kScatter: {
        if (a.count == 0) return Status::Ok();
        const bool root = rank_ == a.root;
        const char* slot = root ? static_cast<const char*>(a.send) + Bytes(a, a.count * static_cast<std::size_t>(rank_))
                                : nullptr;
        void* recv = (root && a.recv == slot) ? MPI_IN_PLACE : a.recv;
        return Post(a, "MPI_Iscatter", [&](MPI_Request* r) {
          return MPI_Iscatter(root ? a.send : nullptr, n, type, recv, n, type, a.root, comm_, r);
        });
      }
      case CollectiveKind::kBarrier:
        if (p2p_comm_ != MPI_COMM_NULL) {
          Transport t(*this, a);
          return P2pBarrier(t, rank_, size_);
        }
        return Post(a, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
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
  return std::unique_ptr<Backend>(new MpiBackend(comm, world_rank, world_size, ctx.group_name, *collectives == "auto",
                                                 std::chrono::microseconds(*spin_us)));
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
