// Backend: what a communication library (Gloo, MPI, NCCL, commkit's host engine) implements.
//
// The interface is deliberately narrow: one Run() for every collective, described by CollectiveArgs,
// and an explicit capability query. ProcessGroup validates arguments, checks Supports() (so a missing
// combination is NotSupported before any communication), assigns sequence numbers, detects mismatched
// collectives and names missing ranks; a backend only moves and reduces data.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/store.h"
#include "commkit/comm/types.h"
#include "commkit/comm/work.h"
#include "commkit/common/coarse_clock.h"
#include "commkit/common/status.h"

namespace commkit {

// One collective call. Buffer sizes, in elements of dtype, for a group of size P:
//   allreduce        send, recv: count                       (send == recv or send == nullptr: in place)
//   broadcast        recv: count on every rank (the root's is the source)
//   reduce           send: count; recv: count on the root
//   allgather        send: count; recv: P * count            (in place: send == recv + rank * count)
//   allgatherv       send: counts[rank]; recv: sum(counts)   (rank r's block at offset sum(counts[<r]))
//   reduce_scatter   send: P * count; recv: count
//   reduce_scatter_v send: sum(counts); recv: counts[rank]
//   alltoall         send, recv: P * count                   (block p goes to / came from rank p)
//   alltoallv        send: sum(counts) (counts[p] to rank p); recv: sum(recv_counts)
//   gather           send: count; recv: P * count on the root
//   scatter          send: P * count on the root; recv: count
//   barrier          no buffers
//   send / recv      count elements to / from `peer`, matched by `tag`
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op;
  int root = 0;
  int peer = -1;
  int tag = 0;
  std::vector<std::size_t> counts;       // v-collectives (see above)
  std::vector<std::size_t> recv_counts;  // alltoallv
  MemoryKind memory = MemoryKind::kHost;
  void* stream = nullptr;  // device backends: a cudaStream_t (nullptr = the current/default stream)
  std::chrono::milliseconds timeout{0};
  std::uint64_t sequence = 0;
  // Set by ProcessGroup: a hash of (kind, dtype, count(s), op, root), equal on every rank that issues
  // the same collective. Backends that return true from ChecksMismatch() compare it across ranks.
  std::uint64_t fingerprint = 0;
  // Set by ProcessGroup for backends that return true from ChecksMismatchOnCompletion(): compare
  // `fingerprint` across ranks on the backend's own communicator, together with this collective.
  bool check_fingerprint = false;
  // Set by ProcessGroup, which times every call itself: a backend that completes the call inside Run()
  // may then leave its Work's Duration() at zero instead of reading the clock twice more.
  bool timed_by_caller = false;
};

// The clock reads of a backend that completes a call inside Run(). CallStart is the base of the call's
// deadlines: a coarse read when the caller times the call (a deadline seconds away needs no precision;
// a precise read costs 25-80 ns on virtual machines, a fifth of an 8-byte all-reduce). CallDuration
// is the Work's duration: zero, without a second read, when the caller times the call.
inline std::chrono::steady_clock::time_point CallStart(const CollectiveArgs& a) {
  return a.timed_by_caller ? CoarseSteadyNow() : std::chrono::steady_clock::now();
}
inline std::chrono::nanoseconds CallDuration(const CollectiveArgs& a, std::chrono::steady_clock::time_point start) {
  return a.timed_by_caller ? std::chrono::nanoseconds::zero() : std::chrono::steady_clock::now() - start;
}

// What a backend is created with.
struct BackendContext {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  // private to this group (already prefixed)
  std::string group_name = "world";
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  int local_rank = -1;  // rank within this node when the launcher says (-1: unknown)
  int device = -1;      // device backends: the GPU to use (-1: derive from local_rank, else rank)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view Name() const = 0;

  // Whether Run() can do this combination. Pure and cheap; answers the same on every rank.
  // `op` is ignored for collectives that do not reduce.
  virtual bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const = 0;

  // Runs one collective whose arguments ProcessGroup has validated. Host backends may block until the
  // data has moved; device backends return once the work is enqueued on the stream. Called from one
  // thread at a time per backend (ProcessGroup serialises calls; see ConcurrentPointToPoint() for the
  // exception). Errors carry the backend's own
  // message and code (BackendError, RemoteError, Timeout).
  virtual Result<std::unique_ptr<Work>> Run(const CollectiveArgs& args) = 0;

  // A new backend for the ranks that pass the same color, ordered by (key, rank); called by every
  // rank of the group, including ranks with a negative color (they join no sub-group: return nullptr;
  // their `context` has size 0). `context` describes the new group (rank, size, store).
  virtual Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int key) = 0;

  // True when Run() compares CollectiveArgs::fingerprint across ranks itself, piggybacked on its own
  // synchronization, and returns StatusCode::kMismatch before moving any data when they differ (on
  // every rank). ProcessGroup then skips its separate fingerprint exchange and reports the per-rank diff.
  virtual bool ChecksMismatch() const { return false; }

  // True when Run() can compare CollectiveArgs::fingerprint across ranks on its own communicator,
  // issued with the collective and without any store traffic or host synchronisation, for calls that
  // set args.check_fingerprint (device backends whose Run() only enqueues: NCCL). The comparison
  // completes no later than the collective: the returned Work (Test/Wait/Synchronize/status) ends
  // with StatusCode::kMismatch on every rank when the fingerprints differ, and a collective that
  // hangs because of the difference fails with kMismatch rather than kTimeout when the comparison
  // finished. Unlike ChecksMismatch(), the data may already have moved (and be wrong) by then.
  // ProcessGroup then skips its store exchange and reports the per-rank diff on the error path only.
  virtual bool ChecksMismatchOnCompletion() const { return false; }

  // True when Run() may be called for send and for recv from two more threads while collectives run
  // on a third (each direction still one call at a time). ProcessGroup then gives sends and receives
  // their own threads, so `Send(peer); Recv(peer)` on both peers cannot block each other. Backends
  // whose Run() only enqueues (NCCL) keep the default.
  virtual bool ConcurrentPointToPoint() const { return false; }

  // Sends of at most this many bytes normally complete without the peer (eager buffers, rings,
  // socket buffers). ProcessGroup then lets a caller waiting for such a send run it before it starts
  // the receive direction's thread, which saves a thread hand-off per small send/recv pair. A send
  // that blocks after all is not an error, only slower (its receive starts a little later). 0: never.
  virtual std::size_t EagerPointToPointBytes() const { return 0; }

  // Stops outstanding work (bounded in time) so that waiting calls return; the backend is unusable
  // afterwards. Safe to call from another thread.
  virtual void Abort(std::string_view reason) = 0;
};

}  // namespace commkit
