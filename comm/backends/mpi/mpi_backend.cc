// The MPI backend: MPI-3 nonblocking collectives polled against the operation's timeout, so a peer
// that never arrives gives a Timeout instead of a hang (the communicator is unusable afterwards: MPI
// cannot cancel a collective). f16/bf16 reduce through commkit's host kernels (user MPI_Ops).
#include <mpi.h>

#include <chrono>
#include <mutex>
#include <numeric>
#include <thread>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/registry.h"
#include "commkit/comm_mpi/mpi.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

using Clock = std::chrono::steady_clock;

// MPI state of the process: initialised once; when the library cannot give MPI_THREAD_MULTIPLE every
// MPI call holds this mutex (several groups may run at once on their own worker threads).
struct MpiProcess {
  std::mutex mu;
  bool serialize = true;
  bool initialized_here = false;
  Status init_status;
};

MpiProcess& Process() {
  static MpiProcess* p = [] {
    auto* s = new MpiProcess();
    int already = 0;
    MPI_Initialized(&already);
    int provided = MPI_THREAD_SINGLE;
    if (!already) {
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        s->init_status = Status::BackendError("mpi backend: MPI_Init_thread failed");
        return s;
      }
      s->initialized_here = true;
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    } else {
      MPI_Query_thread(&provided);
    }
    s->serialize = provided < MPI_THREAD_MULTIPLE;
    if (s->serialize)
      COMMKIT_LOG_WARN("mpi backend: the MPI library gives thread level ", provided,
                       " < MPI_THREAD_MULTIPLE; commkit serialises every MPI call (slower with several groups)");
    return s;
  }();
  return *p;
}

class Lock {
 public:
  Lock() : lock_(Process().mu, std::defer_lock) {
    if (Process().serialize) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

MPI_Datatype ToMpi(DataType t) {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

// User ops for f16/bf16: MPI gives (in, inout): inout = in op inout.
template <DataType T, ReduceKind K>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  GetReduceFunction(T, K)(inout, in, inout, static_cast<std::size_t>(*len));
}

Result<MPI_Op> ToMpiOp(DataType t, ReduceKind k) {
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
    static MPI_Op ops[2][4];
    static std::once_flag once;
    std::call_once(once, [] {
      MPI_Op_create(&HalfOp<DataType::kFloat16, ReduceKind::kSum>, 1, &ops[0][0]);
      MPI_Op_create(&HalfOp<DataType::kFloat16, ReduceKind::kProd>, 1, &ops[0][1]);
      MPI_Op_create(&HalfOp<DataType::kFloat16, ReduceKind::kMin>, 1, &ops[0][2]);
      MPI_Op_create(&HalfOp<DataType::kFloat16, ReduceKind::kMax>, 1, &ops[0][3]);
      MPI_Op_create(&HalfOp<DataType::kBFloat16, ReduceKind::kSum>, 1, &ops[1][0]);
      MPI_Op_create(&HalfOp<DataType::kBFloat16, ReduceKind::kProd>, 1, &ops[1][1]);
      MPI_Op_create(&HalfOp<DataType::kBFloat16, ReduceKind::kMin>, 1, &ops[1][2]);
      MPI_Op_create(&HalfOp<DataType::kBFloat16, ReduceKind::kMax>, 1, &ops[1][3]);
    });
    int i = t == DataType::kFloat16 ? 0 : 1;
    switch (k) {
      case ReduceKind::kSum:
      case ReduceKind::kAvg:
      case ReduceKind::kPreMulSum: return ops[i][0];
      case ReduceKind::kProd: return ops[i][1];
      case ReduceKind::kMin: return ops[i][2];
      case ReduceKind::kMax: return ops[i][3];
      default: return Status::NotSupported("bitwise reductions on f16/bf16");
    }
  }
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPreMulSum: return MPI_SUM;
    case ReduceKind::kProd: return MPI_PROD;
    case ReduceKind::kMin: return MPI_MIN;
    case ReduceKind::kMax: return MPI_MAX;
    case ReduceKind::kBand: return MPI_BAND;
    case ReduceKind::kBor: return MPI_BOR;
    case ReduceKind::kBxor: return MPI_BXOR;
  }
  return Status::NotSupported("reduction");
}

Status MpiError(int code, std::string_view what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::BackendError(StrCat("mpi ", what, ": ", std::string(text, static_cast<std::size_t>(len))));
}

class DoneWork final : public Work {
 public:
  DoneWork(Status s, std::uint64_t seq) : s_(std::move(s)), seq_(seq) {}
  bool Test() override { return true; }
  Status Wait(std::chrono::milliseconds) override { return s_; }
  Status status() const override { return s_; }
  std::chrono::nanoseconds Duration() const override { return std::chrono::nanoseconds(0); }
  std::uint64_t Sequence() const override { return seq_; }

 private:
  Status s_;
  std::uint64_t seq_;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !broken_) {
      Lock lock;
      MPI_Comm_free(&comm_);
    }
  }

  std::string_view Name() const override { return "mpi"; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    if (memory != MemoryKind::kHost) return false;
    if (IsReduction(kind) && (op == ReduceKind::kBand || op == ReduceKind::kBor || op == ReduceKind::kBxor))
      return !IsFloatingPoint(dtype);
    return true;
  }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    if (broken_)
      return Status::Aborted(StrCat("mpi backend: the communicator is unusable since an earlier operation failed (",
                                    broken_reason_, ")"));
    Status s = Dispatch(a);
    return std::unique_ptr<Work>(new DoneWork(s, a.sequence));
  }

  Result<std::unique_ptr<Backend>> Split(const BackendContext& ctx, int color, int key) override {
    MPI_Comm child;
    int rc;
    {
      Lock lock;
      rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child);
    }
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_split");
    if (color < 0 || child == MPI_COMM_NULL) return std::unique_ptr<Backend>();
    int r, n;
    MPI_Comm_rank(child, &r);
    MPI_Comm_size(child, &n);
    if (r != ctx.rank || n != ctx.size)
      return Status::Internal(StrCat("mpi backend: MPI_Comm_split gave rank ", r, "/", n, ", commkit expected ",
                                     ctx.rank, "/", ctx.size));
    MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN);
    return std::unique_ptr<Backend>(new MpiBackend(child, r, n));
  }

  void Abort(std::string_view reason) override {
    broken_ = true;
    broken_reason_ = std::string(reason);
  }

 private:
  // Polls a nonblocking request until it completes or the timeout passes.
  Status Complete(MPI_Request& req, const CollectiveArgs& a) {
    auto deadline = Clock::now() + a.timeout;
    auto pause = std::chrono::microseconds(0);
    while (true) {
      int done = 0;
      int rc;
      {
        Lock lock;
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) {
        broken_ = true;
        broken_reason_ = StrCat(ToString(a.kind), " #", a.sequence, " failed");
        return MpiError(rc, ToString(a.kind));
      }
      if (done) return Status::Ok();
      if (Clock::now() >= deadline) {
        broken_ = true;
        broken_reason_ = StrCat(ToString(a.kind), " #", a.sequence, " timed out");
        return Status::Timeout(StrCat("mpi ", ToString(a.kind), ": not complete after ",
                                      HumanSeconds(a.timeout.count() / 1000.0),
                                      "; MPI cannot cancel a collective, so this communicator is now unusable"));
      }
      if (pause.count() == 0) std::this_thread::yield();
      else std::this_thread::sleep_for(pause);
      pause = std::min(pause + std::chrono::microseconds(5), std::chrono::microseconds(200));
    }
  }

  Result<std::vector<int>> IntCounts(const std::vector<std::size_t>& counts, std::vector<int>* displs) {
    std::vector<int> out;
    std::size_t off = 0;
    for (std::size_t c : counts) {
      if (c > static_cast<std::size_t>(INT32_MAX) || off > static_cast<std::size_t>(INT32_MAX))
        return Status::NotSupported("mpi backend: counts or offsets above 2^31-1 elements");
      out.push_back(static_cast<int>(c));
      if (displs) displs->push_back(static_cast<int>(off));
      off += c;
    }
    return out;
  }

  Status Dispatch(const CollectiveArgs& a) {
    if (a.count > static_cast<std::size_t>(INT32_MAX) / static_cast<std::size_t>(size_))
      return Status::NotSupported("mpi backend: more than 2^31-1 elements in one call");
    const int n = static_cast<int>(a.count);
    const std::size_t es = SizeOf(a.dtype);
    MPI_Datatype t = ToMpi(a.dtype);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    std::vector<char> scratch;
    auto reduce_op = [&]() -> Result<MPI_Op> { return ToMpiOp(a.dtype, a.op.kind); };
    // PREMUL_SUM: reduce a scaled copy of the input as SUM.
    auto input = [&](const void* src, std::size_t elems) -> const void* {
      if (a.op.kind != ReduceKind::kPreMulSum) return src;
      scratch.assign(static_cast<const char*>(src), static_cast<const char*>(src) + elems * es);
      ScaleInPlace(a.dtype, scratch.data(), elems, a.op.scalar);
      return scratch.data();
    };
    switch (a.kind) {
      case CollectiveKind::kAllreduce: {
        COMMKIT_ASSIGN_OR_RETURN(MPI_Op op, reduce_op());
        const void* src = a.send && a.send != a.recv ? a.send : a.recv;
        const void* in = input(src, a.count);
        Lock lock;
        rc = in == a.recv ? MPI_Iallreduce(MPI_IN_PLACE, a.recv, n, t, op, comm_, &req)
                          : MPI_Iallreduce(in, a.recv, n, t, op, comm_, &req);
        break;
      }
      case CollectiveKind::kBroadcast: {
        Lock lock;
        rc = MPI_Ibcast(a.recv, n, t, a.root, comm_, &req);
        break;
      }
      case CollectiveKind::kReduce: {
        COMMKIT_ASSIGN_OR_RETURN(MPI_Op op, reduce_op());
        const void* src = a.send && a.send != a.recv ? a.send : a.recv;
        const void* in = input(src, a.count);
        Lock lock;
        if (rank_ == a.root && in == a.recv) rc = MPI_Ireduce(MPI_IN_PLACE, a.recv, n, t, op, a.root, comm_, &req);
        else rc = MPI_Ireduce(in, a.recv, n, t, op, a.root, comm_, &req);
        break;
      }
      case CollectiveKind::kAllgather: {
        Lock lock;
        if (a.send == nullptr || a.send == static_cast<char*>(a.recv) + es * a.count * rank_ || a.send == a.recv)
          rc = MPI_Iallgather(MPI_IN_PLACE, 0, t, a.recv, n, t, comm_, &req);
        else rc = MPI_Iallgather(a.send, n, t, a.recv, n, t, comm_, &req);
        break;
      }
      case CollectiveKind::kAllgatherv: {
        std::vector<int> displs;
        COMMKIT_ASSIGN_OR_RETURN(auto counts, IntCounts(a.counts, &displs));
        {
          Lock lock;
          if (a.send == nullptr || a.send == a.recv)
            rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, t, a.recv, counts.data(), displs.data(), t, comm_, &req);
          else
            rc = MPI_Iallgatherv(a.send, counts[rank_], t, a.recv, counts.data(), displs.data(), t, comm_, &req);
        }
        if (rc != MPI_SUCCESS) return MpiError(rc, "allgatherv");
        return Complete(req, a);  // the count vectors outlive the request here
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kReduceScatterV: {
        COMMKIT_ASSIGN_OR_RETURN(MPI_Op op, reduce_op());
        std::vector<std::size_t> c = a.kind == CollectiveKind::kReduceScatter
                                         ? std::vector<std::size_t>(static_cast<std::size_t>(size_), a.count)
                                         : a.counts;
        COMMKIT_ASSIGN_OR_RETURN(auto counts, IntCounts(c, nullptr));
        std::size_t total = std::accumulate(c.begin(), c.end(), std::size_t{0});
        const void* in = input(a.send, total);
        {
          Lock lock;
          rc = MPI_Ireduce_scatter(in, a.recv, counts.data(), t, op, comm_, &req);
        }
        if (rc != MPI_SUCCESS) return MpiError(rc, "reduce_scatter");
        COMMKIT_RETURN_IF_ERROR(Complete(req, a));
        if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, c[rank_], size_);
        return Status::Ok();
      }
      case CollectiveKind::kAlltoall: {
        Lock lock;
        if (a.send == nullptr || a.send == a.recv) rc = MPI_Ialltoall(MPI_IN_PLACE, 0, t, a.recv, n, t, comm_, &req);
        else rc = MPI_Ialltoall(a.send, n, t, a.recv, n, t, comm_, &req);
        break;
      }
      case CollectiveKind::kAlltoallv: {
        std::vector<int> sd, rd;
        COMMKIT_ASSIGN_OR_RETURN(auto sc, IntCounts(a.counts, &sd));
        COMMKIT_ASSIGN_OR_RETURN(auto rcnt, IntCounts(a.recv_counts, &rd));
        {
          Lock lock;
          rc = MPI_Ialltoallv(a.send, sc.data(), sd.data(), t, a.recv, rcnt.data(), rd.data(), t, comm_, &req);
        }
        if (rc != MPI_SUCCESS) return MpiError(rc, "alltoallv");
        return Complete(req, a);  // the count vectors outlive the request here
      }
      case CollectiveKind::kGather: {
        Lock lock;
        rc = MPI_Igather(a.send, n, t, a.recv, n, t, a.root, comm_, &req);
        break;
      }
      case CollectiveKind::kScatter: {
        Lock lock;
        rc = MPI_Iscatter(a.send, n, t, a.recv, n, t, a.root, comm_, &req);
        break;
      }
      case CollectiveKind::kBarrier: {
        Lock lock;
        rc = MPI_Ibarrier(comm_, &req);
        break;
      }
      case CollectiveKind::kSend: {
        Lock lock;
        rc = MPI_Isend(a.send, n, t, a.peer, a.tag, comm_, &req);
        break;
      }
      case CollectiveKind::kRecv: {
        Lock lock;
        rc = MPI_Irecv(a.recv, n, t, a.peer, a.tag, comm_, &req);
        break;
      }
    }
    if (rc != MPI_SUCCESS) return MpiError(rc, ToString(a.kind));
    COMMKIT_RETURN_IF_ERROR(Complete(req, a));
    if (a.op.kind == ReduceKind::kAvg && (a.kind == CollectiveKind::kAllreduce ||
                                          (a.kind == CollectiveKind::kReduce && rank_ == a.root)))
      DivideInPlace(a.dtype, a.recv, a.count, size_);
    return Status::Ok();
  }

  MPI_Comm comm_;
  int rank_, size_;
  bool broken_ = false;
  std::string broken_reason_;
};

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

Result<std::unique_ptr<Backend>> CreateMpiBackend(const BackendContext& ctx) {
  if (!LaunchedByMpi() && ctx.size > 1)
    return Status::Unavailable(StrCat("mpi backend: this process was not launched by mpirun or srun (no OMPI_COMM_WORLD_SIZE, "
                                      "PMI_SIZE or PMIX_RANK); start the job with `mpirun -np ", ctx.size,
                                      " ...` or choose the gloo backend"));
  MpiProcess& p = Process();
  if (!p.init_status.ok()) return p.init_status;
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != ctx.rank || size != ctx.size)
    return Status::InvalidArgument(StrCat("mpi backend: MPI_COMM_WORLD is rank ", rank, "/", size,
                                          " but the process group was created as rank ", ctx.rank, "/", ctx.size,
                                          "; create it from the environment (ProcessGroup::FromEnvironment)"));
  MPI_Comm comm;
  {
    Lock lock;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  return std::unique_ptr<Backend>(new MpiBackend(comm, rank, size));
}

}  // namespace

}  // namespace commkit

extern "C" void commkit_register_mpi_backend(commkit::Registry* registry) {
  commkit::BackendInfo info;
  info.name = "mpi";
  info.memory = commkit::MemoryKind::kHost;
  info.available = true;
  info.create = &commkit::CreateMpiBackend;
  registry->Register(std::move(info));
}
