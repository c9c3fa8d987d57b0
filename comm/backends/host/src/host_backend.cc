#include "commkit/comm/host/host_backend.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "commkit/common/cpu_cache.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "shm/shm_transport.h"
#if COMMKIT_HAVE_UCX
#include "host_remote.h"
#endif

namespace commkit::comm::host {

namespace {

using algorithms::CountOffsets;
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
              std::size_t stream_from)
      : t_(std::move(transport)), table_(std::move(table)), remote_(std::move(remote)), stream_from_(stream_from) {}

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

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    const auto start = CallStart(a);
    const Deadline deadline = start + a.timeout;
    Status s;
    if (remote_ != nullptr) {
      if (!broken_.ok()) {
        s = Status(broken_.code(), StrCat("an earlier operation failed on this rank; recreate the process group (earlier "
                                          "error: ", broken_.message(), ")"));
      } else {
        consistent_failure_ = false;
        s = RunRemote(a, deadline);
        if (!s.ok() && !consistent_failure_ && a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv)
          broken_ = s;
      }
    } else if (a.kind == CollectiveKind::kSend) {
      s = t_->Send(a.peer, a.tag, a.send, a.count * SizeOf(a.dtype), deadline);
    } else if (a.kind == CollectiveKind::kRecv) {
      s = t_->Recv(a.peer, a.tag, a.recv, a.count * SizeOf(a.dtype), deadline);
    } else if (!broken_.ok()) {
      s = Status(broken_.code(), StrCat("an earlier collective failed on this rank, so the host backend's rounds are no "
                                        "longer aligned across ranks; recreate the process group (earlier error: ",
                                        broken_.message(), ")"));
    } else {
      consistent_failure_ = false;
      s = Dispatch(a, deadline);
      // Mismatches and bad alltoallv counts are seen by every rank in the same round: the group stays usable.
      if (!s.ok() && !consistent_failure_) broken_ = s;
    }
    return CompletedWork(std::move(s), a.sequence, CallDuration(a, start));
  }

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
    CountOffsets(counts, e, offsets_);
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
                 std::size_t n) {
    if (n == 0) return;
    ReduceFunction fn = Fn(a);
    if (P() == 1) {
      std::memmove(out, src[0] + offset, n * SizeOf(a.dtype));
      return;
    }
    fn(out, src[0] + offset, src[1] + offset, n);
    for (int q = 2; q < P(); ++q) fn(out, out, src[q] + offset, n);
  }

  // This rank's share of a reduction: dst = own op (every peer's slot at `at`), peers in rank order,
  // over n elements (dst may be `own`). The sliced all-reduce and the reduce-scatter reduce alike.
  void ReduceWithPeers(ReduceFunction fn, std::uint8_t* dst, const std::uint8_t* own, std::size_t at, std::size_t n) {
    bool first = true;
    for (int q = 0; q < P(); ++q) {
      if (q == me()) continue;
      fn(dst, first ? own : dst, t_->Peer(q) + at, n);
      first = false;
    }
  }

  // PREMUL_SUM scales every operand, this rank's too: its own `n` elements are copied into `staging`
  // (a part of its slot no peer reads in this round) and scaled there. Returns the operand to use.
  const std::uint8_t* OwnOperand(const CollectiveArgs& a, const std::uint8_t* own, std::uint8_t* staging, std::size_t n) {
    if (a.op.kind != ReduceKind::kPreMulSum) return own;
    std::memcpy(staging, own, n * SizeOf(a.dtype));
    ScaleInPlace(a.dtype, staging, n, a.op.scalar);
    return staging;
  }

  // Large all-reduce (root < 0) and reduce, per slot-sized chunk: a reduce-scatter and an all-gather
  // through the slots. Each rank copies only the slices its peers reduce into its slot; it reduces its
  // own slice from its input and every peer's slot straight into its output (and into its slot, for the
  // peers to gather); then it copies the peers' reduced slices out of their slots. Against copying the
  // whole chunk in and out, that moves 1/P less each way, and the bytes that cross between cores (the
  // cost that dominates on one socket) are exactly the reduce-scatter's and the all-gather's.
  Status Sliced(const CollectiveArgs& a, Deadline d, const std::uint8_t* in, int root) {
    const std::size_t e = SizeOf(a.dtype), ce = t_->slot_bytes() / e, n = a.count;
    const std::size_t p = static_cast<std::size_t>(P());
    const bool scale = a.op.kind == ReduceKind::kPreMulSum, avg = a.op.kind == ReduceKind::kAvg;
    const bool gather = root < 0 || me() == root;
    ReduceFunction fn = Fn(a);
    auto* out = static_cast<std::uint8_t*>(a.recv);
    const bool stream = gather && Streams(2 * n * e);
    for (std::size_t off = 0; off < n; off += ce) {
      const std::size_t len = std::min(ce, n - off);
      COMMKIT_ASSIGN_OR_RETURN(std::uint8_t * slot, t_->Begin(d));
      const std::size_t rot = t_->RotatedOffset(len * e);
      slot += rot;
      auto lo = [&](std::size_t q) { return len * q / p; };
      const std::size_t mlo = lo(me()), mhi = lo(me() + 1);
      const std::uint8_t* chunk = in + off * e;
      std::memcpy(slot, chunk, mlo * e);
      std::memcpy(slot + mhi * e, chunk + mhi * e, (len - mhi) * e);
      if (scale) {
        ScaleInPlace(a.dtype, slot, mlo, a.op.scalar);
        ScaleInPlace(a.dtype, slot + mhi * e, len - mhi, a.op.scalar);
      }
      t_->Post(a.fingerprint);
      if (Status s = t_->WaitPosted(d); !s.ok()) return RoundFailed(std::move(s));
      if (mhi > mlo) {
        std::uint8_t* mine = slot + mlo * e;
        const std::uint8_t* own = OwnOperand(a, chunk + mlo * e, mine, mhi - mlo);
        // A non-root rank of a reduce only hands its slice to the root: it reduces into its slot.
        std::uint8_t* dst = gather ? out + (off + mlo) * e : mine;
        const bool publish = root < 0 && dst != mine;
        // Blocks that stay in L1 between the reduction and the copy into the slot.
        const std::size_t block = std::max<std::size_t>(1, (16 << 10) / e);
        for (std::size_t b = 0; b < mhi - mlo; b += block) {
          const std::size_t m = std::min(block, mhi - mlo - b);
          // A streamed output is reduced into the slot (which the peers read next) and streamed out from there.
          std::uint8_t* to = stream && publish ? mine + b * e : dst + b * e;
          ReduceWithPeers(fn, to, own + b * e, rot + (mlo + b) * e, m);
          if (avg) DivideInPlace(a.dtype, to, m, P());
          if (stream && publish) {
            StreamingCopy(dst + b * e, to, m * e);
          } else if (publish) {
            std::memcpy(mine + b * e, dst + b * e, m * e);
          }
        }
      }
      t_->SignalReduced();
      if (gather) {
        COMMKIT_RETURN_IF_ERROR(t_->WaitReduced(d));
        for (int q = 0; q < P(); ++q) {
          const std::size_t qlo = lo(q), qhi = lo(q + 1);
          if (q != me() && qhi > qlo) Copy(stream, out + (off + qlo) * e, t_->Peer(q) + rot + qlo * e, (qhi - qlo) * e);
        }
      }
      t_->Finish();
    }
    return Status::Ok();
  }

  // Reduce-scatter(v) over two or more ranks. The slot holds one sub-block per rank; in round r every
  // rank copies piece r of each peer's block into that peer's sub-block, and reduces piece r of its own
  // block from its input and the peers' sub-blocks straight into its output. Its own block is never
  // staged, and each round has one synchronisation.
  Status ReduceScatterPieces(const CollectiveArgs& a, Deadline d, const std::vector<std::size_t>& counts) {
    const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P());
    const std::size_t sub = t_->slot_bytes() / p / 64 * 64;  // a multiple of every element size
    const std::vector<std::size_t>& off = Offsets(counts, e);
    const bool scale = a.op.kind == ReduceKind::kPreMulSum;
    std::size_t most = 0;
    for (std::size_t q = 0; q < p; ++q) most = std::max(most, counts[q] * e);
    const std::size_t rounds = std::max<std::size_t>(1, (most + sub - 1) / sub);
    const auto* in = static_cast<const std::uint8_t*>(a.send);
    auto* out = static_cast<std::uint8_t*>(a.recv);
    const std::size_t m = static_cast<std::size_t>(me());
    ReduceFunction fn = Fn(a);
    for (std::size_t r = 0; r < rounds; ++r) {
      const std::size_t lo = r * sub;
      auto piece = [&](std::size_t q) { return counts[q] * e > lo ? std::min(sub, counts[q] * e - lo) : 0; };
      COMMKIT_ASSIGN_OR_RETURN(std::uint8_t * slot, t_->Begin(d));
      // Each sub-block's piece moves within the sub-block (ShmTransport::RotatedOffset); the biggest
      // piece sets the step, and every rank knows every piece.
      std::size_t biggest = 0, moved = 0;
      for (std::size_t q = 0; q < p; ++q) {
        biggest = std::max(biggest, piece(q));
        moved += piece(q);
      }
      const std::size_t rot = t_->RotatedOffset(biggest, sub, moved);
      for (std::size_t q = 0; q < p; ++q) {
        if (q == m || piece(q) == 0) continue;
        std::memcpy(slot + q * sub + rot, in + off[q] + lo, piece(q));
        if (scale) ScaleInPlace(a.dtype, slot + q * sub + rot, piece(q) / e, a.op.scalar);
      }
      t_->Post(a.fingerprint);
      if (Status s = t_->WaitPosted(d); !s.ok()) return RoundFailed(std::move(s));
      if (const std::size_t n = piece(m) / e; n > 0) {
        std::uint8_t* dst = out + lo;
        ReduceWithPeers(fn, dst, OwnOperand(a, in + off[m] + lo, slot + m * sub + rot, n), m * sub + rot, n);
        if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, dst, n, P());
      }
      t_->Finish();
    }
    return Status::Ok();
  }

  Status Reduction(const CollectiveArgs& a, Deadline d, int root) {
    const std::size_t e = SizeOf(a.dtype), bytes = a.count * e;
    const auto* in = static_cast<const std::uint8_t*>(a.send ? a.send : a.recv);
    // Flat or sliced: the selection table's choice (tuning.h).
    const bool sliced =
        P() > 1 && table_.Select(a.kind, MemoryKind::kHost, bytes).algorithm == CollectiveAlgorithm::kSliced;
    tune::NoteRun("host", sliced ? CollectiveAlgorithm::kSliced : CollectiveAlgorithm::kFlat);
    if (sliced) return Sliced(a, d, in, root);
    auto* out = static_cast<std::uint8_t*>(a.recv);
    COMMKIT_RETURN_IF_ERROR(Exchange(a, d, in, Uniform(bytes), [&](std::size_t lo, const auto& src) {
      if (root < 0 || me() == root) ReduceAll(a, out + lo, src, 0, std::min(t_->slot_bytes(), bytes - lo) / e);
    }));
    if (a.op.kind == ReduceKind::kAvg && P() > 1 && (root < 0 || me() == root)) DivideInPlace(a.dtype, out, a.count, P());
    return Status::Ok();
  }

  Status Dispatch(const CollectiveArgs& a, Deadline d) {
    const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
    auto* recv = static_cast<std::uint8_t*>(a.recv);
    const auto* send = static_cast<const std::uint8_t*>(a.send);
    switch (a.kind) {
      case CollectiveKind::kAllreduce: return Reduction(a, d, -1);
      case CollectiveKind::kReduce: return Reduction(a, d, a.root);
      case CollectiveKind::kBroadcast: {
        std::vector<std::size_t>& bytes = Blocks(0);
        bytes[a.root] = a.count * e;
        return Exchange(a, d, recv, bytes, [&](std::size_t lo, const auto& src) {
          if (me() != a.root && src[a.root]) std::memcpy(recv + lo, src[a.root], std::min(S, bytes[a.root] - lo));
        });
      }
      case CollectiveKind::kAllgather:
      case CollectiveKind::kAllgatherv:
      case CollectiveKind::kGather: {
        const std::vector<std::size_t>& counts = Counts(a, a.kind == CollectiveKind::kAllgatherv);
        const std::vector<std::size_t>& off = Offsets(counts, e);
        std::vector<std::size_t>& bytes = Blocks(0);
        for (std::size_t q = 0; q < p; ++q) bytes[q] = counts[q] * e;
        const std::uint8_t* mine = send && send != recv ? send : recv + off[me()];
        const bool take = a.kind != CollectiveKind::kGather || me() == a.root;
        const bool stream = take && Streams(bytes[me()] + off[p]);
        return Exchange(a, d, mine, bytes, [&](std::size_t lo, const auto& src) {
          if (!take) return;
          for (std::size_t q = 0; q < p; ++q) {
            if (!src[q]) continue;
            // This rank's own block comes from its input (nothing to do in place), not back out of its slot.
            const std::uint8_t* from = q == static_cast<std::size_t>(me()) ? mine + lo : src[q];
            std::uint8_t* dst = recv + off[q] + lo;
            if (dst != from) Copy(stream, dst, from, std::min(S, bytes[q] - lo));
          }
        });
      }
      case CollectiveKind::kScatter: {
        const std::size_t block = a.count * e;
        std::vector<std::size_t>& bytes = Blocks(0);
        bytes[a.root] = block * p;
        const std::size_t mlo = block * me(), mhi = mlo + block;
        return Exchange(a, d, send, bytes, [&](std::size_t lo, const auto& src) {
          if (!src[a.root]) return;
          std::size_t hi = lo + std::min(S, bytes[a.root] - lo);
          std::size_t x0 = std::max(lo, mlo), x1 = std::min(hi, mhi);
          if (x1 > x0) std::memcpy(recv + (x0 - mlo), src[a.root] + (x0 - lo), x1 - x0);
        });
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kReduceScatterV: {
        const std::vector<std::size_t>& counts = Counts(a, a.kind == CollectiveKind::kReduceScatterV);
        if (P() > 1 && S / p >= 64) return ReduceScatterPieces(a, d, counts);
        const std::vector<std::size_t>& off = Offsets(counts, e);
        const std::size_t total = off[p], mlo = off[me()], mhi = off[me() + 1];
        COMMKIT_RETURN_IF_ERROR(Exchange(a, d, send, Uniform(total), [&](std::size_t lo, const auto& src) {
          std::size_t hi = lo + std::min(S, total - lo);
          std::size_t x0 = std::max(lo, mlo), x1 = std::min(hi, mhi);
          if (x1 > x0) ReduceAll(a, recv + (x0 - mlo), src, x0 - lo, (x1 - x0) / e);
        }));
        if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, recv, counts[me()], P());
        return Status::Ok();
      }
      case CollectiveKind::kAlltoall: {
        std::vector<std::size_t> counts(p, a.count);
        return AlltoallBlocks(a, d, std::vector<std::vector<std::size_t>>(p, counts), counts);
      }
      case CollectiveKind::kAlltoallv: {
        // A first round publishes every rank's send and receive counts, so all ranks check the whole
        // matrix (and fail together when it is inconsistent) and know where their blocks are.
        std::vector<std::uint64_t> header(2 * p);
        for (std::size_t q = 0; q < p; ++q) {
          header[q] = a.counts[q];
          header[p + q] = a.recv_counts[q];
        }
        std::vector<std::vector<std::size_t>> sends(p, std::vector<std::size_t>(p)), recvs = sends;
        COMMKIT_RETURN_IF_ERROR(Exchange(a, d, header.data(), Uniform(header.size() * 8),
                                         [&](std::size_t, const auto& src) {
                                           for (std::size_t q = 0; q < p; ++q) {
                                             const auto* h = reinterpret_cast<const std::uint64_t*>(src[q]);
                                             for (std::size_t r = 0; r < p; ++r) {
                                               sends[q][r] = h[r];
                                               recvs[q][r] = h[p + r];
                                             }
                                           }
                                         }));
        for (std::size_t q = 0; q < p; ++q)
          for (std::size_t r = 0; r < p; ++r)
            if (sends[q][r] != recvs[r][q]) {
              consistent_failure_ = true;
              return Status::InvalidArgument(
                  StrCat("alltoallv: rank ", q, " sends ", sends[q][r], " elements to rank ", r, ", which expects ",
                         recvs[r][q], " (send_counts[", r, "] on rank ", q, " must equal recv_counts[", q, "] on rank ", r, ")"));
            }
        return AlltoallBlocks(a, d, sends, a.recv_counts);
      }
      case CollectiveKind::kBarrier:
        return Exchange(a, d, nullptr, Uniform(0), [](std::size_t, const auto&) {});
      case CollectiveKind::kSend:
      case CollectiveKind::kRecv: break;
    }
    return Status::Internal("host backend: unexpected collective");
  }

  // sends[q][r]: elements rank q sends to rank r; recv_counts[q]: elements this rank gets from q.
  Status AlltoallBlocks(const CollectiveArgs& a, Deadline d, const std::vector<std::vector<std::size_t>>& sends,
                        const std::vector<std::size_t>& recv_counts) {
    const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
    std::vector<std::vector<std::size_t>> soff(p);
    std::vector<std::size_t> bytes(p);
    for (std::size_t q = 0; q < p; ++q) {
      soff[q] = CountOffsets(sends[q], e);
      bytes[q] = soff[q][p];
    }
    auto roff = CountOffsets(recv_counts, e);
    auto* recv = static_cast<std::uint8_t*>(a.recv);
    const std::uint8_t* mine = static_cast<const std::uint8_t*>(a.send);
    if (mine == nullptr || mine == recv) {  // in place: the output overwrites the input, stage it
      scratch_.assign(recv, recv + bytes[me()]);
      mine = scratch_.data();
    }
    const std::size_t m = static_cast<std::size_t>(me());
    return Exchange(a, d, mine, bytes, [&](std::size_t lo, const auto& src) {
      for (std::size_t q = 0; q < p; ++q) {
        if (!src[q]) continue;
        std::size_t hi = lo + std::min(S, bytes[q] - lo);
        std::size_t x0 = std::max(lo, soff[q][m]), x1 = std::min(hi, soff[q][m + 1]);
        if (x1 > x0) std::memcpy(recv + roff[q] + (x0 - soff[q][m]), src[q] + (x0 - lo), x1 - x0);
      }
    });
  }

  // Across hosts: all-reduce hierarchically (shared-memory reduce to each host's leader, a ring or
  // halving-doubling among the leaders, shared-memory broadcast) or flat (ring or halving-doubling
  // over every rank), as the plan for the size says; everything else flat over UCX.
  Status RunRemote(const CollectiveArgs& args, Deadline d) {
#if COMMKIT_HAVE_UCX
    // UCX tags carry a per-backend operation count, not the group's sequence number: ProcessGroup's
    // fingerprint all-reduce and the operation it checks share one sequence number.
    CollectiveArgs a = args;
    if (a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv) a.sequence = ++remote_ops_;
    const std::size_t bytes = a.count * SizeOf(a.dtype);
    const tune::Choice plan = a.kind == CollectiveKind::kAllreduce ? table_.Select(a.kind, MemoryKind::kHost, bytes)
                                                                   : tune::Choice{};  // ring
    if (a.kind == CollectiveKind::kAllreduce) tune::NoteRun("host", plan.algorithm);
    if (plan.algorithm != CollectiveAlgorithm::kHierarchical)
      return remote_->collectives->Run(a, d,
                                       plan.algorithm == CollectiveAlgorithm::kHalvingDoubling
                                           ? CollectiveAlgorithm::kHalvingDoubling
                                           : CollectiveAlgorithm::kRing);
    const bool avg = a.op.kind == ReduceKind::kAvg;
    CollectiveArgs local = a;
    local.kind = CollectiveKind::kReduce;
    local.root = 0;
    if (avg) local.op = ReduceOp::Sum();
    COMMKIT_RETURN_IF_ERROR(Reduction(local, d, 0));
    if (remote_->leader) {
      ReduceKind between = avg || a.op.kind == ReduceKind::kPreMulSum ? ReduceKind::kSum : a.op.kind;
      const CollectiveAlgorithm leaders = plan.params.between == CollectiveAlgorithm::kHalvingDoubling
                                              ? CollectiveAlgorithm::kHalvingDoubling
                                              : CollectiveAlgorithm::kRing;
      COMMKIT_RETURN_IF_ERROR(
          remote_->collectives->Allreduce(leaders, a, a.recv, a.count, between, remote_->leaders, d));
      if (avg) DivideInPlace(a.dtype, a.recv, a.count, remote_->size);
    }
    CollectiveArgs bcast = a;
    bcast.kind = CollectiveKind::kBroadcast;
    bcast.root = 0;
    bcast.send = a.recv;
    return Dispatch(bcast, d);
#else
    (void)args;
    (void)d;
    return Status::Internal("host backend: built without UCX");
#endif
  }

  std::unique_ptr<ShmTransport> t_;
  tune::Table table_;
  std::unique_ptr<RemoteState> remote_;
  std::size_t stream_from_;  // Streams(): the cache the host's ranks share (0: never stream)
  std::uint64_t remote_ops_ = 0;
  Status broken_;
  bool consistent_failure_ = false;
  std::vector<std::uint8_t> scratch_;
  std::vector<std::size_t> uniform_, blocks_, counts_, offsets_;  // Uniform(), Blocks(), Counts(), Offsets()
  std::vector<const std::uint8_t*> src_ = std::vector<const std::uint8_t*>(t_->size());  // Exchange's per-round view
};


}  // namespace

Result<std::unique_ptr<Backend>> CreateHostBackend(const BackendContext& context) {
  ShmTransportOptions options;
  options.size_setting = "COMMKIT_HOST_SLOT_BYTES";
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t slot, EnvIntOr("COMMKIT_HOST_SLOT_BYTES", 1 << 20, 64 << 10, std::int64_t{1} << 30));
  options.slot_bytes = static_cast<std::size_t>(slot) / 64 * 64;  // every element size divides it
  const std::string who = StrCat("host backend, rank ", context.rank, "/", context.size, " of ", context.group_name);
  // HostBackend::Streams(): the cache of the CPU this rank starts on (no streaming when sysfs does not say).
  const std::optional<CpuCache> cache = LastLevelCache(*SystemView::Live(), ::sched_getcpu());
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t stream_from, EnvIntOr("COMMKIT_HOST_STREAM_BYTES",
                                                              cache ? static_cast<std::int64_t>(cache->bytes) : 0, 0,
                                                              std::int64_t{1} << 50));

  // Which ranks share a host (its /dev/shm): hosts ordered by their lowest rank.
  auto domains = StoreExchange(context, "")("hosts", shm::ShmDomain());
  if (!domains.ok()) return domains.status().WithContext(StrCat(who, ": waiting for every rank to arrive"));
  std::vector<std::string> order;
  std::vector<std::vector<int>> hosts;
  for (int q = 0; q < context.size; ++q) {
    const auto h = static_cast<std::size_t>(std::find(order.begin(), order.end(), (*domains)[q]) - order.begin());
    if (h == order.size()) order.push_back((*domains)[q]), hosts.emplace_back();
    hosts[h].push_back(q);
  }
  // Which algorithm runs at each size: the selection table (COMMKIT_TUNE, calibration, topology, defaults).
  std::size_t most = 0;
  for (const auto& h : hosts) most = std::max(most, h.size());
  auto table = tune::Table::ForBackend(
      "host", context,
      {context.size, static_cast<int>(most), static_cast<int>(hosts.size()),
       static_cast<int>(std::thread::hardware_concurrency())});
  if (!table.ok()) return table.status().WithContext(who);
  if (hosts.size() == 1) {
    COMMKIT_ASSIGN_OR_RETURN(auto transport, ShmTransport::Connect(context.rank, context.size, context.group_name,
                                                                   StoreExchange(context, "host/"), options));
    return std::unique_ptr<Backend>(new HostBackend(std::move(transport), std::move(*table), nullptr, stream_from));
  }
#if COMMKIT_HAVE_UCX
  const std::size_t mine = static_cast<std::size_t>(
      std::find(order.begin(), order.end(), (*domains)[context.rank]) - order.begin());
  BackendContext local = context;
  local.rank = static_cast<int>(std::find(hosts[mine].begin(), hosts[mine].end(), context.rank) - hosts[mine].begin());
  local.size = static_cast<int>(hosts[mine].size());
  local.store = std::make_shared<PrefixStore>(StrCat("host", mine), context.store);
  local.group_name = StrCat(context.group_name, "/host", mine);
  options.names = hosts[mine];  // errors name group ranks, not ranks within the host
  COMMKIT_ASSIGN_OR_RETURN(auto transport, ShmTransport::Connect(local.rank, local.size, local.group_name,
                                                                 StoreExchange(local, "host/"), options));
  auto remote = std::make_unique<RemoteState>();
  COMMKIT_ASSIGN_OR_RETURN(remote->ucx, UcxTransport::Connect(context));
  remote->collectives = std::make_unique<RemoteCollectives>(*remote->ucx);
  for (const auto& h : hosts) remote->leaders.push_back(h.front());
  remote->leader = local.rank == 0;
  remote->size = context.size;
  if (context.rank == 0)
    COMMKIT_LOG_INFO(who, ": ", context.size, " ranks on ", hosts.size(), " hosts (shared memory within, UCX between); "
                     "all-reduce: ", tune::Describe(*table, CollectiveKind::kAllreduce, MemoryKind::kHost));
  return std::unique_ptr<Backend>(new HostBackend(std::move(transport), std::move(*table), std::move(remote), stream_from));
#else
  return Status::Unavailable(StrCat(who, ": the ranks span ", hosts.size(), " hosts and this build has no UCX for the "
                                    "transport between them (apt install libucx-dev; COMMKIT_WITH_UCX=ON); use gloo or mpi"));
#endif
}

BackendInfo HostBackendInfo() {
  BackendInfo info;
  info.name = "host";
  info.memory = MemoryKind::kHost;
  info.available = true;
  info.create = &CreateHostBackend;
  return info;
}

}  // namespace commkit::comm::host
