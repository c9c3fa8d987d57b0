// All-reduce, broadcast and barrier built on point-to-point exchanges, for backends whose library
// collectives are blocking (unbounded waits) and whose nonblocking ones are slow: the MPI backend runs
// these over MPI_Isend/MPI_Irecv polled with a deadline (Open MPI's libnbc costs ~10 us per small call,
// its point-to-point path well under 1 us). No MPI types here: the transport is an interface.
#pragma once

#include <cstddef>
#include <vector>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/status.h"

namespace commkit {

// One exchange step. Blocking until both directions are done, the caller's deadline passes or the
// transport fails (then the collective returns that status and the group is not reusable: peers may be
// mid-step). Called from one thread at a time per transport.
class P2pTransport {
 public:
  virtual ~P2pTransport() = default;
  // Sends `send_bytes` from `send` to rank `to` while receiving `recv_bytes` into `recv` from rank
  // `from`. `to` or `from` may be -1 (that direction is skipped); zero-byte messages are still sent
  // (they synchronise). Messages between one pair arrive in the order they were sent.
  virtual Status SendRecv(int to, const void* send, std::size_t send_bytes, int from, void* recv,
                          std::size_t recv_bytes) = 0;
};

struct P2pAllreduceArgs {
  void* buf = nullptr;  // every rank's result; also its input when `in` is null or equal to `buf`
  const void* in = nullptr;  // out of place: the input (not modified; must not overlap `buf`)
  std::size_t count = 0;
  std::size_t elem_size = 0;
  ReduceFunction reduce = nullptr;  // commutative; c = a op b
  // Above this many bytes (and with at least `size` elements) the ring (reduce-scatter + allgather,
  // 2(p-1)/p of the data per rank) is used instead of recursive doubling (log2 p full exchanges).
  std::size_t ring_min_bytes = 64 << 10;
  // The ring's reduce-scatter moves each chunk in pieces of at most this many bytes (reduced while
  // in cache); both sides of a step must use the same value.
  std::size_t segment_bytes = 256 << 10;
};

// Recursive doubling (non-power-of-two rank counts fold the extra ranks in and out) or a ring. Every
// rank ends with bitwise-identical results. `scratch` is grown as needed and kept by the caller so
// large calls do not fault in fresh pages every time.
Status P2pAllreduce(P2pTransport& t, int rank, int size, const P2pAllreduceArgs& args, std::vector<char>& scratch);

// Binomial tree from `root`.
Status P2pBroadcast(P2pTransport& t, int rank, int size, int root, void* buf, std::size_t bytes);

// Dissemination barrier: ceil(log2 p) rounds of zero-byte exchanges.
Status P2pBarrier(P2pTransport& t, int rank, int size);

}  // namespace commkit
