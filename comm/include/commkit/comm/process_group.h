// ProcessGroup: the comm layer training code links. A group of `size` ranks sharing a store, running
// collectives through one backend.
//
//   auto pg = ProcessGroup::FromEnvironment({.backend = "gloo"});   // torchrun, mpirun, srun, commkit-run
//   auto work = (*pg)->Allreduce(grad, grad, n, DataType::kFloat32, ReduceOp::Avg());
//   Status s = (*work)->Wait();   // "allreduce #12 (rank 3/8): timed out after 30 s; rank 5 never arrived"
//
// Guarantees:
// - Arguments are validated locally (null buffers, count overflow, root or peer out of range, v-counts
//   of the wrong length) with InvalidArgument before any communication.
// - A combination the backend cannot do is NotSupported before any communication (Supports()).
// - Every operation has a timeout (the group's, or the per-op override) and never hangs past it; the
//   error names the op, its sequence number and the ranks that did not arrive.
// - Ranks that call different collectives, counts, types or roots at the same sequence number get a
//   Mismatch error on every rank with a per-rank diff (COMMKIT_CHECK_MISMATCH=0 disables the check).
// - Collectives from several threads are serialised in call order; Work completes in that order.
// - Sends and receives run on a thread per direction (gloo, mpi, host), in call order per direction
//   and independently of collectives, so both peers may Send() before they Recv().
// - Operations up to COMMKIT_INLINE_BYTES (default 256 KiB) with nothing queued ahead of them run on
//   the calling thread (the returned Work is already complete): a hand-off to the group's worker
//   thread costs more than such an operation. Larger ones, and send/recv, run on the worker, so the
//   caller overlaps them with computation.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/store.h"

namespace commkit {

struct ProcessGroupOptions {
  std::string backend = "auto";  // "gloo", "mpi", "nccl", "host", or "auto"
  MemoryKind memory = MemoryKind::kHost;  // what "auto" chooses for
  std::string name = "world";
  std::chrono::milliseconds timeout = std::chrono::minutes(10);  // COMMKIT_TIMEOUT overrides
  bool check_mismatch = true;  // COMMKIT_CHECK_MISMATCH=0 overrides
  int local_rank = -1;  // set by FromEnvironment(); device backends pick their GPU from it
  int device = -1;      // device backends: explicit GPU index
};

// Per-call options.
struct OpOptions {
  std::chrono::milliseconds timeout{0};  // 0: the group's timeout
  std::optional<MemoryKind> memory;      // unset: the group's (see ProcessGroup::memory())
  void* stream = nullptr;  // device backends
};

class ProcessGroup {
 public:
  static Result<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                      const ProcessGroupOptions& options = {});
  // Rendezvous from the launcher's environment (see rendezvous.h), then Create().
  static Result<std::unique_ptr<ProcessGroup>> FromEnvironment(const ProcessGroupOptions& options = {});

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  std::string_view backend_name() const;
  const std::string& name() const;
  // Where operations' buffers live unless OpOptions::memory says otherwise: device memory for a
  // backend that only takes device buffers (NCCL), else ProcessGroupOptions::memory (host by default).
  MemoryKind memory() const;
  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceOp op = {}) const;
  // Writes this group's flight record (its last operations, see flight_recorder.h) as JSON to
  // <dir>/<group>-rank<rank>.json (dir: COMMKIT_FLIGHT_RECORDER_DIR's when empty); returns the path.
  Result<std::filesystem::path> DumpFlightRecord(std::string_view reason = "requested",
                                                 const std::filesystem::path& dir = {}) const;

  using WorkPtr = std::unique_ptr<Work>;
  Result<WorkPtr> Allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                            const OpOptions& opts = {});
  Result<WorkPtr> Broadcast(void* buffer, std::size_t count, DataType dtype, int root, const OpOptions& opts = {});
  Result<WorkPtr> Reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
                         const OpOptions& opts = {});
  Result<WorkPtr> Allgather(const void* send, void* recv, std::size_t count, DataType dtype, const OpOptions& opts = {});
  Result<WorkPtr> Allgatherv(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                             const OpOptions& opts = {});
  Result<WorkPtr> ReduceScatter(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                const OpOptions& opts = {});
  Result<WorkPtr> ReduceScatterV(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                                 ReduceOp op, const OpOptions& opts = {});
  Result<WorkPtr> Alltoall(const void* send, void* recv, std::size_t count, DataType dtype, const OpOptions& opts = {});
  Result<WorkPtr> Alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                            const std::vector<std::size_t>& recv_counts, DataType dtype, const OpOptions& opts = {});
  Result<WorkPtr> Gather(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                         const OpOptions& opts = {});
  Result<WorkPtr> Scatter(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                          const OpOptions& opts = {});
  Result<WorkPtr> Barrier(const OpOptions& opts = {});
  Result<WorkPtr> Send(const void* buffer, std::size_t count, DataType dtype, int peer, int tag = 0,
                       const OpOptions& opts = {});
  Result<WorkPtr> Recv(void* buffer, std::size_t count, DataType dtype, int peer, int tag = 0,
                       const OpOptions& opts = {});

  // A sub-group of the ranks passing the same color, ordered by (key, rank); every rank must call it.
  // A negative color returns nullptr (this rank joins no sub-group).
  Result<std::unique_ptr<ProcessGroup>> Split(int color, int key);

  class Impl;

 private:
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace commkit
