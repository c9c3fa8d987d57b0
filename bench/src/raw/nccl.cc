// Raw NCCL baseline: the same collective on the same device buffers and stream, called on a blocking
// NCCL communicator of its own (ncclCommInitRank with a unique id exchanged through the job's store),
// without commkit's engine, Work objects, events or watchdog. `--compare nccl --raw nccl` puts the
// wrapper's cost per call next to NCCL's. Each call is enqueued and returns; the runner times the
// stream with CUDA events, as it does for the wrapped backend.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "commkit/bench/device.h"
#include "commkit/comm/nccl/nccl_types.h"
#include "commkit/common/strings.h"
#include "raw/raw.h"

namespace commkit::bench::raw {
namespace {

Result<ncclDataType_t> NcclType(DataType t) {
  if (const int v = comm::nccl::NcclDataType(t); v >= 0) return static_cast<ncclDataType_t>(v);
  return Status::NotSupported(StrCat("commkit-bench: --raw nccl: no NCCL type for ", ToString(t)));
}

Result<ncclRedOp_t> NcclOp(ReduceKind kind) {
  if (const int v = comm::nccl::NcclRedOp(kind); v >= 0) return static_cast<ncclRedOp_t>(v);
  return Status::NotSupported("commkit-bench: --raw nccl: NCCL has sum, prod, min, max and avg only");
}

Status NcclCall(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::BackendError(StrCat("commkit-bench: --raw nccl: ", what, ": ", ncclGetErrorString(r), " (",
                                     ncclGetLastError(nullptr), ")"));
}

// Owns the communicator; destroyed (not aborted) at the end of the run, after the stream drained.
struct Communicator {
  ncclComm_t comm = nullptr;
  ~Communicator() {
    if (comm != nullptr) (void)ncclCommDestroy(comm);
  }
};

}  // namespace

Result<std::unique_ptr<RawCollective>> MakeNccl(const BenchOptions& o, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store, Device* device) {
  if (device == nullptr) {
    return Status::InvalidArgument(
        "commkit-bench: --raw nccl needs device buffers: use it with -B nccl (or --compare nccl,...)");
  }
  if (store == nullptr) return Status::Unavailable("commkit-bench: --raw nccl needs the job's store");
  COMMKIT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(o.dtype));
  ncclRedOp_t op = ncclSum;
  const CollectiveDescriptor& d = Describe(o.collective);
  if (d.reduces) {
    COMMKIT_ASSIGN_OR_RETURN(op, NcclOp(o.op.kind));
  }

  // Rank 0 makes the unique id; everyone reads it from the store (bounded by --timeout).
  ncclUniqueId id;
  const std::string key = "nccl-unique-id";
  if (rank == 0) {
    COMMKIT_RETURN_IF_ERROR(NcclCall(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    COMMKIT_RETURN_IF_ERROR(store->Set(key, std::string_view(id.internal, sizeof(id.internal))));
  } else {
    COMMKIT_ASSIGN_OR_RETURN(std::string bytes, store->Get(key, std::chrono::seconds(o.timeout_s)));
    if (bytes.size() != sizeof(id.internal)) {
      return Status::DataLoss(StrCat("commkit-bench: --raw nccl: the unique id in the store has ", bytes.size(),
                                     " bytes, expected ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  if (cudaSetDevice(device->index()) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::BackendError(StrCat("commkit-bench: --raw nccl: cudaSetDevice(", device->index(), ") failed"));
  }
  auto owner = std::make_shared<Communicator>();
  COMMKIT_RETURN_IF_ERROR(NcclCall(ncclCommInitRank(&owner->comm, nranks, id, rank), "ncclCommInitRank"));

  auto raw = std::make_unique<RawCollective>();
  raw->label = "raw-nccl";
  auto stream = static_cast<cudaStream_t>(device->stream());
  const BenchCollective which = o.collective;
  const int root = o.root;
  raw->run = [owner, stream, which, type, op, root, rank, nranks](const void* send, void* recv,
                                                                          const BufferCounts& c) -> Status {
    ncclComm_t comm = owner->comm;
    switch (which) {
      case BenchCollective::kAllreduce:
        return NcclCall(ncclAllReduce(send, recv, c.count, type, op, comm, stream), "ncclAllReduce");
      case BenchCollective::kAllgather:
        return NcclCall(ncclAllGather(send, recv, c.count, type, comm, stream), "ncclAllGather");
      case BenchCollective::kReduceScatter:
        return NcclCall(ncclReduceScatter(send, recv, c.count, type, op, comm, stream), "ncclReduceScatter");
      case BenchCollective::kBroadcast:
        return NcclCall(ncclBroadcast(recv, recv, c.count, type, root, comm, stream), "ncclBroadcast");
      case BenchCollective::kReduce:
        return NcclCall(ncclReduce(send, recv, c.count, type, op, root, comm, stream), "ncclReduce");
      case BenchCollective::kAlltoall:
        return NcclCall(ncclAlltoAll(send, recv, c.count, type, comm, stream), "ncclAlltoAll");
      case BenchCollective::kSendRecv: {
        COMMKIT_RETURN_IF_ERROR(NcclCall(ncclGroupStart(), "ncclGroupStart"));
        Status s = NcclCall(ncclSend(send, c.count, type, (rank + 1) % nranks, comm, stream), "ncclSend");
        Status r = NcclCall(ncclRecv(recv, c.count, type, (rank - 1 + nranks) % nranks, comm, stream), "ncclRecv");
        Status g = NcclCall(ncclGroupEnd(), "ncclGroupEnd");
        COMMKIT_RETURN_IF_ERROR(s);
        COMMKIT_RETURN_IF_ERROR(r);
        return g;
      }
    }
    return Status::Internal("commkit-bench: --raw nccl: unknown collective");
  };
  return raw;
}

}  // namespace commkit::bench::raw
