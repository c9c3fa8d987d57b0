// The host backend's engine, private to commkit::comm: one HostBackend per group and rank. Its
// collectives live in host_backend.cc (dispatch, all-to-all, the calls across hosts),
// host_reductions.cc (all-reduce, reduce, reduce-scatter) and host_gather.cc (all-gather, gather and
// the single-copy path; the check at creation that enables it is shm/single_copy.h).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/comm/backend.h"
#include "commkit/comm/host/host_backend.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "shm/shm_transport.h"
#include "shm/single_copy.h"
#if COMMKIT_HAVE_UCX
#include "host_remote.h"
#endif

namespace commkit::comm::host {

using Deadline = ShmTransport::Deadline;


// Ranks on several hosts: shared memory within each host, UCX between them.
struct RemoteState {
#if COMMKIT_HAVE_UCX
  std::unique_ptr<UcxTransport> ucx;
  std::unique_ptr<RemoteCollectives> collectives;
#endif
  std::vector<int> leaders;  // the lowest group rank of every host, in host order
  bool leader = false;
  int size = 0;  // the whole group
};

class HostBackend final : public Backend {
 public:
  HostBackend(std::unique_ptr<ShmTransport> transport, tune::Table table, std::unique_ptr<RemoteState> remote,
              std::size_t stream_from, bool single_copy)
      : t_(std::move(transport)),
        table_(std::move(table)),
        remote_(std::move(remote)),
        stream_from_(stream_from),
        single_copy_(single_copy) {}

  std::string_view Name() const override { return "host"; }
  // Across hosts the fingerprints only meet within each host: ProcessGroup's own exchange is needed.
  bool ChecksMismatch() const override { return remote_ == nullptr; }
  // Send/recv use per-pair rings (or UCX tags) with their own locks, apart from the collective rounds.
  bool ConcurrentPointToPoint() const override { return true; }
  // An eighth of a pair's ring: several small sends fit before one waits for the peer.
  std::size_t EagerPointToPointBytes() const override { return ShmTransportOptions{}.ring_bytes / 8; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    return memory == MemoryKind::kHost && IsDefinedReduction(kind, dtype, op);
  }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override;

  Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int) override {
    if (color < 0) return std::unique_ptr<Backend>();
    return CreateHostBackend(context);
  }

  void Abort(std::string_view reason) override {
    t_->Abort(reason);
#if COMMKIT_HAVE_UCX
    if (remote_ != nullptr) remote_->ucx->Abort(reason);
#endif
  }

 private:

  int me() const { return t_->rank(); }
  int P() const { return t_->size(); }

  // Ends a round that failed the fingerprint check: every rank sees it, every rank finishes the round.
  Status RoundFailed(Status s) {
    if (s.code() == StatusCode::kMismatch) {
      t_->Finish();
      consistent_failure_ = true;
    }
    return s;
  }

  // The generic windowed exchange: rank q contributes bytes[q] bytes starting at `mine` (on this rank);
  // in round r every rank posts its window [r*S, (r+1)*S) and on_round sees every rank's window
  // (src[q] == nullptr when q's contribution is shorter). PREMUL_SUM inputs are scaled in the slot.
  // A template, not a std::function: the callback is inlined, and a small call allocates nothing.
  template <typename OnRound>
  Status Exchange(const CollectiveArgs& a, Deadline d, const void* mine, const std::vector<std::size_t>& bytes,
                  OnRound&& on_round) {
    const std::size_t S = t_->slot_bytes();
    const std::size_t most = *std::max_element(bytes.begin(), bytes.end());
    const std::size_t rounds = std::max<std::size_t>(1, (most + S - 1) / S);
    std::vector<const std::uint8_t*>& src = src_;
    const bool scale = IsReduction(a.kind) && a.op.kind == ReduceKind::kPreMulSum;
    if (P() == 1 && !scale) {  // alone: read the input where it is, no staging copy
      for (std::size_t r = 0; r < rounds; ++r) {
        src[0] = bytes[0] > r * S ? static_cast<const std::uint8_t*>(mine) + r * S : nullptr;
        on_round(r * S, src);
      }
      return Status::Ok();
    }
    const bool tiny = most <= ShmTransport::kInlineBytes;
    for (std::size_t r = 0; r < rounds; ++r) {
      const std::size_t lo = r * S;
      COMMKIT_ASSIGN_OR_RETURN(std::uint8_t * slot, t_->Begin(d));
      const std::size_t rot = tiny ? 0 : t_->RotatedOffset(std::min(S, most - lo));
      slot = tiny ? t_->InlineData() : slot + rot;
      if (bytes[me()] > lo) {
        std::size_t n = std::min(S, bytes[me()] - lo);
        std::memcpy(slot, static_cast<const std::uint8_t*>(mine) + lo, n);
        if (scale) ScaleInPlace(a.dtype, slot, n / SizeOf(a.dtype), a.op.scalar);
      }
      t_->Post(a.fingerprint);
      if (Status s = t_->WaitPosted(d); !s.ok()) return RoundFailed(std::move(s));
      for (int q = 0; q < P(); ++q) src[q] = bytes[q] <= lo ? nullptr : tiny ? t_->PeerInline(q) : t_->Peer(q) + rot;
      on_round(lo, src);
      t_->Finish();
    }
    return Status::Ok();
  }

  // Per-rank vectors kept across calls, so that a small collective allocates nothing: every rank
  // contributing `b` bytes; a block size per rank, all `b` to start with; the call's per-rank counts
  // (its own for the v-variants); their byte offsets (P + 1 entries).
  const std::vector<std::size_t>& Uniform(std::size_t b) {
    uniform_.assign(static_cast<std::size_t>(P()), b);
    return uniform_;
  }
  std::vector<std::size_t>& Blocks(std::size_t b) {
    blocks_.assign(static_cast<std::size_t>(P()), b);
    return blocks_;
  }
  const std::vector<std::size_t>& Counts(const CollectiveArgs& a, bool v) {
    if (v) return a.counts;
    counts_.assign(static_cast<std::size_t>(P()), a.count);
    return counts_;
  }
  const std::vector<std::size_t>& Offsets(const std::vector<std::size_t>& counts, std::size_t e) {
    algorithms::CountOffsets(counts, e, offsets_);
    return offsets_;
  }

  ReduceFunction Fn(const CollectiveArgs& a) const { return GetReduceFunction(a.dtype, a.op.kind); }

  // Whether a call that reads and writes `bytes` on this rank (input and output) streams its output
  // (StreamingCopy): once the host's ranks together touch more than their shared cache holds, the output
  // is gone from the cache before it is read, and a regular store reads every line it writes first.
  bool Streams(std::size_t bytes) const { return stream_from_ > 0 && bytes * t_->size() >= stream_from_; }
  static void Copy(bool stream, void* dst, const void* src, std::size_t n) {
    if (stream) {
      StreamingCopy(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  }

  // out = src[0] op src[1] op ... in rank order (identical on every rank that computes it).
  void ReduceAll(const CollectiveArgs& a, void* out, const std::vector<const std::uint8_t*>& src, std::size_t offset,
                 std::size_t n);

  // This rank's share of a reduction: dst = own op (every peer's slot at `at`), peers in rank order,
  // over n elements (dst may be `own`). The sliced all-reduce and the reduce-scatter reduce alike.
  void ReduceWithPeers(ReduceFunction fn, std::uint8_t* dst, const std::uint8_t* own, std::size_t at, std::size_t n);

  // PREMUL_SUM scales every operand, this rank's too: its own `n` elements are copied into `staging`
  // (a part of its slot no peer reads in this round) and scaled there. Returns the operand to use.
  const std::uint8_t* OwnOperand(const CollectiveArgs& a, const std::uint8_t* own, std::uint8_t* staging, std::size_t n);

  // Large all-reduce (root < 0) and reduce, per slot-sized chunk: a reduce-scatter and an all-gather
  // through the slots. Each rank copies only the slices its peers reduce into its slot; it reduces its
  // own slice from its input and every peer's slot straight into its output (and into its slot, for the
  // peers to gather); then it copies the peers' reduced slices out of their slots. Against copying the
  // whole chunk in and out, that moves 1/P less each way, and the bytes that cross between cores (the
  // cost that dominates on one socket) are exactly the reduce-scatter's and the all-gather's.
  Status Sliced(const CollectiveArgs& a, Deadline d, const std::uint8_t* in, int root);

  // All-reduce read from the peers' buffers (single_copy_): a round announces every rank's input, and
  // each rank reduces its own 1/P slice from its input and every peer's slice, read in L2-sized blocks
  // (process_vm_readv, memcpy between threads) into `read_`, straight into its output; then the
  // reduced slices are gathered the same way (SingleCopyGather, in place). No slot holds data: each
  // byte crosses between ranks once per phase, read by the rank that needs it.
  Status SingleCopyAllreduce(const CollectiveArgs& a, Deadline d, const std::uint8_t* in);

  // Reduce-scatter(v) over two or more ranks. The slot holds one sub-block per rank; in round r every
  // rank copies piece r of each peer's block into that peer's sub-block, and reduces piece r of its own
  // block from its input and the peers' sub-blocks straight into its output. Its own block is never
  // staged, and each round has one synchronisation.
  Status ReduceScatterPieces(const CollectiveArgs& a, Deadline d, const std::vector<std::size_t>& counts);

  Status Reduction(const CollectiveArgs& a, Deadline d, int root);

  Status Dispatch(const CollectiveArgs& a, Deadline d);

  // The first phase of a single-copy round (host_gather.cc): every rank announces `buffer` in the
  // round's line and waits for every peer's; Announced(q) is then where rank q's buffer is.
  Status AnnounceBuffer(const CollectiveArgs& a, Deadline d, const void* buffer);
  PeerBuffer Announced(int q) const {
    PeerBuffer b;
    std::memcpy(&b, t_->PeerInline(q), sizeof b);
    return b;
  }

  // host_gather.cc: all-gather(v) and gather within a host, staged through the slots (flat) or, where the
  // selection table says single_copy and every local rank can read its peers (single_copy_), read from
  // each peer's input straight into the output.
  Status Gather(const CollectiveArgs& a, Deadline d);
  Status SingleCopyGather(const CollectiveArgs& a, Deadline d, const std::uint8_t* mine, const std::vector<std::size_t>& bytes,
                          const std::vector<std::size_t>& off, bool take);

  // sends[q][r]: elements rank q sends to rank r; recv_counts[q]: elements this rank gets from q.
  Status AlltoallBlocks(const CollectiveArgs& a, Deadline d, const std::vector<std::vector<std::size_t>>& sends,
                        const std::vector<std::size_t>& recv_counts);

  // Across hosts: all-reduce hierarchically (shared-memory reduce to each host's leader, a ring or
  // halving-doubling among the leaders, shared-memory broadcast) or flat (ring or halving-doubling
  // over every rank), as the plan for the size says; everything else flat over UCX.
  Status RunRemote(const CollectiveArgs& args, Deadline d);

  std::unique_ptr<ShmTransport> t_;
  tune::Table table_;
  std::unique_ptr<RemoteState> remote_;
  std::size_t stream_from_;  // Streams(): the cache the host's ranks share (0: never stream)
  bool single_copy_;         // every rank of the group can read every peer's memory (SingleCopyPossible)
  std::uint64_t remote_ops_ = 0;
  Status broken_;
  bool consistent_failure_ = false;
  std::vector<std::uint8_t> scratch_;
  std::vector<std::uint8_t> read_;  // SingleCopyAllreduce's block of a peer's slice
  std::vector<std::size_t> uniform_, blocks_, counts_, offsets_;  // Uniform(), Blocks(), Counts(), Offsets()
  std::vector<const std::uint8_t*> src_ = std::vector<const std::uint8_t*>(t_->size());  // Exchange's per-round view
};

}  // namespace commkit::comm::host
