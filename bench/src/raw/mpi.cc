// Raw MPI baseline: MPI_Allreduce & co. on MPI_COMM_WORLD, blocking calls.
// C API only (no Open MPI C++ bindings to link).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "commkit/common/strings.h"
#include "raw/raw.h"

namespace commkit::bench::raw {
namespace {

Result<MPI_Datatype> MpiType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    default: break;
  }
  return Status::NotSupported(StrCat("commkit-bench: --raw mpi has no ", ToString(t), " type (MPI lacks f16/bf16)"));
}

Result<MPI_Op> MpiOp(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return MPI_SUM;
    case ReduceKind::kProd: return MPI_PROD;
    case ReduceKind::kMin: return MPI_MIN;
    case ReduceKind::kMax: return MPI_MAX;
    default: break;
  }
  return Status::NotSupported(StrCat("commkit-bench: --raw mpi has no ", ToString(k), " reduction"));
}

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::BackendError(StrCat("commkit-bench: ", what, " failed: ", std::string(msg, len)));
}

}  // namespace

void AbortMpi(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

Result<std::unique_ptr<RawCollective>> MakeMpi(const BenchOptions& o, int rank, int nranks) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    COMMKIT_RETURN_IF_ERROR(Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init"));
    // We initialised MPI, so we finalise it at exit (unless someone else already did).
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  int mpi_rank = -1, mpi_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (mpi_rank != rank || mpi_size != nranks) {
    return Status::Unavailable(StrCat("commkit-bench: --raw mpi: MPI_COMM_WORLD is rank ", mpi_rank, "/", mpi_size,
                                      " but the process group is rank ", rank, "/", nranks,
                                      "; launch with mpirun/srun (not --local or commkit-run)"));
  }
  COMMKIT_ASSIGN_OR_RETURN(MPI_Datatype type, MpiType(o.dtype));
  MPI_Op op = MPI_SUM;
  if (Describe(o.collective).reduces) {
    COMMKIT_ASSIGN_OR_RETURN(op, MpiOp(o.op.kind));
  }
  auto raw = std::make_unique<RawCollective>();
  raw->label = "raw-mpi";
  const BenchCollective coll = o.collective;
  const int root = o.root;
  raw->run = [=](const void* send, void* recv, const BufferCounts& c) -> Status {
    const int n = static_cast<int>(c.count);
    const bool in_place = send == recv;
    const void* s = in_place ? MPI_IN_PLACE : send;
    switch (coll) {
      case BenchCollective::kAllreduce:
        return Check(MPI_Allreduce(s, recv, n, type, op, MPI_COMM_WORLD), "MPI_Allreduce");
      case BenchCollective::kAllgather: {
        int tsize = 0;
        MPI_Type_size(type, &tsize);
        const bool ip = static_cast<const char*>(send) == static_cast<char*>(recv) + static_cast<std::size_t>(rank) * c.count * static_cast<std::size_t>(tsize);
        return Check(MPI_Allgather(ip ? MPI_IN_PLACE : send, n, type, recv, n, type, MPI_COMM_WORLD),
                     "MPI_Allgather");
      }
      case BenchCollective::kReduceScatter: {
        int tsize = 0;
        MPI_Type_size(type, &tsize);
        const bool ip = static_cast<char*>(recv) == static_cast<const char*>(send) + static_cast<std::size_t>(rank) * c.count * static_cast<std::size_t>(tsize);
        if (ip) {
          // MPI in-place reduce_scatter leaves the result at the start of the buffer; copy it to the chunk.
          void* buf = const_cast<void*>(send);
          Status st = Check(MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, n, type, op, MPI_COMM_WORLD),
                            "MPI_Reduce_scatter_block");
          if (st.ok() && rank != 0) std::memmove(recv, buf, c.count * static_cast<std::size_t>(tsize));
          return st;
        }
        return Check(MPI_Reduce_scatter_block(send, recv, n, type, op, MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
      }
      case BenchCollective::kBroadcast:
        return Check(MPI_Bcast(recv, n, type, root, MPI_COMM_WORLD), "MPI_Bcast");
      case BenchCollective::kReduce:
        return Check(MPI_Reduce(in_place && rank == root ? MPI_IN_PLACE : send, recv, n, type, op, root,
                                MPI_COMM_WORLD),
                     "MPI_Reduce");
      case BenchCollective::kAlltoall:
        return Check(MPI_Alltoall(send, n, type, recv, n, type, MPI_COMM_WORLD), "MPI_Alltoall");
      case BenchCollective::kSendRecv: {
        const int p = nranks;
        return Check(MPI_Sendrecv(send, n, type, (rank + 1) % p, 0, recv, n, type, (rank - 1 + p) % p, 0,
                                  MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                     "MPI_Sendrecv");
      }
    }
    return Status::Internal("commkit-bench: raw mpi: unknown collective");
  };
  return raw;
}

}  // namespace commkit::bench::raw
