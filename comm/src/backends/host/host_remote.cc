#include "host_remote.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/strings.h"

namespace commkit::host {

namespace {

using Op = UcxTransport::Op;

Op SendOp(int peer, const void* buf, std::size_t bytes) {
  Op op;
  op.send = true;
  op.peer = peer;
  op.buf = buf;
  op.bytes = bytes;
  return op;
}
Op RecvOp(int peer, void* out, std::size_t bytes) {
  Op op;
  op.peer = peer;
  op.out = out;
  op.bytes = bytes;
  return op;
}

// memcpy for ranges that may be empty: an empty block's pointer may be null (zero-size collectives).
void CopyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// Byte offsets of `parts` near-equal blocks of `count` elements.
std::vector<std::size_t> EvenOffsets(std::size_t count, std::size_t parts, std::size_t esize) {
  std::vector<std::size_t> off(parts + 1);
  for (std::size_t i = 0; i <= parts; ++i) off[i] = count * i / parts * esize;
  return off;
}
std::vector<std::size_t> CountOffsets(const std::vector<std::size_t>& counts, std::size_t esize) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i] * esize;
  return off;
}

}  // namespace

// Ring reduce-scatter: after n-1 steps, ring position i holds block i fully reduced.
Status RemoteAlgorithms::RingReduceScatter(const CollectiveArgs& a, std::uint8_t* buf, const std::vector<std::size_t>& off,
                                           ReduceKind kind, const std::vector<int>& ring, std::uint32_t step, Deadline d) {
  const std::size_t n = ring.size();
  if (n <= 1) return Status::Ok();
  const std::size_t i = static_cast<std::size_t>(std::find(ring.begin(), ring.end(), t_.rank()) - ring.begin());
  const int right = ring[(i + 1) % n], left = ring[(i + n - 1) % n];
  std::size_t biggest = 0;
  for (std::size_t b = 0; b < n; ++b) biggest = std::max(biggest, off[b + 1] - off[b]);
  scratch_.resize(biggest);
  ReduceFunction fn = GetReduceFunction(a.dtype, kind);
  for (std::size_t s = 0; s + 1 < n; ++s) {
    const std::size_t sb = (i + 2 * n - s - 1) % n, rb = (i + 2 * n - s - 2) % n;
    std::vector<Op> ops{SendOp(right, buf + off[sb], off[sb + 1] - off[sb]), RecvOp(left, scratch_.data(), off[rb + 1] - off[rb])};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, step + static_cast<std::uint32_t>(s), d));
    fn(buf + off[rb], buf + off[rb], scratch_.data(), (off[rb + 1] - off[rb]) / SizeOf(a.dtype));
  }
  return Status::Ok();
}

// Ring all-gather: position i starts with block i and ends with all of them.
Status RemoteAlgorithms::RingAllgather(const CollectiveArgs& a, std::uint8_t* buf, const std::vector<std::size_t>& off,
                                       const std::vector<int>& ring, std::uint32_t step, Deadline d) {
  const std::size_t n = ring.size();
  if (n <= 1) return Status::Ok();
  const std::size_t i = static_cast<std::size_t>(std::find(ring.begin(), ring.end(), t_.rank()) - ring.begin());
  const int right = ring[(i + 1) % n], left = ring[(i + n - 1) % n];
  for (std::size_t s = 0; s + 1 < n; ++s) {
    const std::size_t sb = (i + n - s) % n, rb = (i + 2 * n - s - 1) % n;
    std::vector<Op> ops{SendOp(right, buf + off[sb], off[sb + 1] - off[sb]), RecvOp(left, buf + off[rb], off[rb + 1] - off[rb])};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, step + static_cast<std::uint32_t>(s), d));
  }
  return Status::Ok();
}

Status RemoteAlgorithms::RingAllreduce(const CollectiveArgs& a, void* buf, std::size_t count, ReduceKind kind,
                                       const std::vector<int>& ring, Deadline d) {
  if (ring.size() <= 1 || count == 0) return Status::Ok();
  auto off = EvenOffsets(count, ring.size(), SizeOf(a.dtype));
  auto* b = static_cast<std::uint8_t*>(buf);
  COMMKIT_RETURN_IF_ERROR(RingReduceScatter(a, b, off, kind, ring, 0, d));
  return RingAllgather(a, b, off, ring, 1 << 15, d);
}

Status RemoteAlgorithms::HalvingDoublingAllreduce(const CollectiveArgs& a, void* buf, std::size_t count,
                                                  ReduceKind kind, const std::vector<int>& ranks, Deadline d) {
  const std::size_t n = ranks.size();
  if (n <= 1 || count == 0) return Status::Ok();
  const std::size_t e = SizeOf(a.dtype);
  const std::size_t i = static_cast<std::size_t>(std::find(ranks.begin(), ranks.end(), t_.rank()) - ranks.begin());
  auto* b = static_cast<std::uint8_t*>(buf);
  ReduceFunction fn = GetReduceFunction(a.dtype, kind);
  std::size_t pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const std::size_t extra = n - pof2;
  // Steps: 0 fold, 1.. halving, 0x100.. doubling, 0x200 unfold (within one collective's sequence).
  constexpr std::uint32_t kHalving = 1, kDoubling = 0x100, kUnfold = 0x200;
  // Fold: of each of the first `extra` pairs the even member hands its buffer to the odd one.
  if (i < 2 * extra) {
    const int partner = ranks[i ^ 1];
    if (i % 2 == 0) {
      std::vector<Op> ops{SendOp(partner, b, count * e)};
      COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, 0, d));
      std::vector<Op> back{RecvOp(partner, b, count * e)};
      return t_.Run(back, 0, a.sequence, kUnfold, d);
    }
    scratch_.resize(count * e);
    std::vector<Op> ops{RecvOp(partner, scratch_.data(), count * e)};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, 0, d));
    fn(b, scratch_.data(), b, count);  // lower rank's operand first
  }
  // Index among the p' participants, and back to a group rank.
  const std::size_t v = i < 2 * extra ? i / 2 : i - extra;
  auto real = [&](std::size_t w) { return ranks[w < extra ? 2 * w + 1 : w + extra]; };
  const auto off = EvenOffsets(count, pof2, e);
  // Recursive halving: at distance `mask` keep the half of the current block range that bit `mask`
  // of v selects, send the other half to the partner and reduce its copy of ours.
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // block ranges before each halving
  std::size_t lo = 0, hi = pof2;
  std::uint32_t step = 0;
  // The first halving receives the most: one half of the buffer.
  scratch_.resize(std::max({scratch_.size(), off[pof2 / 2], off[pof2] - off[pof2 / 2]}));
  for (std::size_t mask = 1; mask < pof2; mask <<= 1, ++step) {
    ranges.emplace_back(lo, hi);
    const std::size_t mid = (lo + hi) / 2;
    const bool upper = (v & mask) != 0;
    const std::size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const std::size_t give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
    const std::size_t keep_bytes = off[keep_hi] - off[keep_lo];
    const int partner = real(v ^ mask);
    std::vector<Op> ops{SendOp(partner, b + off[give_lo], off[give_hi] - off[give_lo]),
                        RecvOp(partner, scratch_.data(), keep_bytes)};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, kHalving + step, d));
    // The lower participant's operand first, so the result does not depend on who reduces.
    std::uint8_t* mine = b + off[keep_lo];
    if (upper) {
      fn(mine, scratch_.data(), mine, keep_bytes / e);
    } else {
      fn(mine, mine, scratch_.data(), keep_bytes / e);
    }
    lo = keep_lo;
    hi = keep_hi;
  }
  // Recursive doubling, the halving in reverse: swap the reduced halves until every block is everywhere.
  step = 0;
  for (std::size_t mask = pof2 / 2; mask >= 1; mask >>= 1, ++step) {
    const auto [plo, phi] = ranges.back();
    ranges.pop_back();
    const std::size_t other_lo = lo == plo ? hi : plo, other_hi = lo == plo ? phi : lo;
    const int partner = real(v ^ mask);
    std::vector<Op> ops{SendOp(partner, b + off[lo], off[hi] - off[lo]),
                        RecvOp(partner, b + off[other_lo], off[other_hi] - off[other_lo])};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, kDoubling + step, d));
    lo = plo;
    hi = phi;
  }
  // Unfold: the folded ranks get the result.
  if (i < 2 * extra) {
    std::vector<Op> ops{SendOp(ranks[i ^ 1], b, count * e)};
    return t_.Run(ops, 0, a.sequence, kUnfold, d);
  }
  return Status::Ok();
}

Status RemoteAlgorithms::Allreduce(AllreduceAlgorithm algorithm, const CollectiveArgs& a, void* buf, std::size_t count,
                                   ReduceKind kind, const std::vector<int>& ranks, Deadline d) {
  return algorithm == AllreduceAlgorithm::kHalvingDoubling ? HalvingDoublingAllreduce(a, buf, count, kind, ranks, d)
                                                           : RingAllreduce(a, buf, count, kind, ranks, d);
}

Status RemoteAlgorithms::Broadcast(const CollectiveArgs& a, Deadline d) {
  const int p = t_.size(), v = (t_.rank() - a.root + p) % p;
  const std::size_t bytes = a.count * SizeOf(a.dtype);
  auto real = [&](int rel) { return (rel + a.root) % p; };
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      std::vector<Op> ops{RecvOp(real(v - mask), a.recv, bytes)};
      COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, 0, d));
      break;
    }
    mask <<= 1;
  }
  std::vector<Op> ops;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) ops.push_back(SendOp(real(v + mask), a.recv, bytes));
  return t_.Run(ops, 0, a.sequence, 0, d);
}

Status RemoteAlgorithms::Alltoall(const CollectiveArgs& a, const std::vector<std::size_t>& send_counts,
                                  const std::vector<std::size_t>& recv_counts, Deadline d) {
  const int p = t_.size(), r = t_.rank();
  const std::size_t e = SizeOf(a.dtype);
  auto soff = CountOffsets(send_counts, e), roff = CountOffsets(recv_counts, e);
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  if (send == nullptr || send == recv) {  // in place: stage the input
    staging_.assign(recv, recv + soff[p]);
    send = staging_.data();
  }
  if (send_counts[r] != recv_counts[r])
    return Status::InvalidArgument(StrCat("alltoallv: rank ", r, " sends ", send_counts[r], " elements to itself but expects ",
                                          recv_counts[r]));
  CopyBytes(recv + roff[r], send + soff[r], soff[r + 1] - soff[r]);
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p, from = (r - s + p) % p;
    std::vector<Op> ops{SendOp(to, send + soff[to], soff[to + 1] - soff[to]),
                        RecvOp(from, recv + roff[from], roff[from + 1] - roff[from])};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, static_cast<std::uint32_t>(s), d));
  }
  return Status::Ok();
}

Status RemoteAlgorithms::Run(const CollectiveArgs& a, Deadline d, AllreduceAlgorithm allreduce) {
  const int p = t_.size(), r = t_.rank();
  const std::size_t e = SizeOf(a.dtype), n = a.count;
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  std::vector<int> all(p);
  std::iota(all.begin(), all.end(), 0);
  const ReduceKind plain = a.op.kind == ReduceKind::kAvg || a.op.kind == ReduceKind::kPreMulSum ? ReduceKind::kSum : a.op.kind;
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduce: {
      // Reduce runs as an all-reduce whose result only the root keeps.
      std::uint8_t* out = recv;
      if (a.kind == CollectiveKind::kReduce && r != a.root) {
        staging_.resize(n * e);
        out = staging_.data();
      }
      const auto* in = send ? send : recv;
      if (in != out) CopyBytes(out, in, n * e);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, out, n, a.op.scalar);
      COMMKIT_RETURN_IF_ERROR(Allreduce(allreduce, a, out, n, plain, all, d));
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, out, n, p);
      return Status::Ok();
    }
    case CollectiveKind::kBroadcast: return n == 0 ? Status::Ok() : Broadcast(a, d);
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAllgatherv: {
      auto off = a.kind == CollectiveKind::kAllgatherv ? CountOffsets(a.counts, e) : EvenOffsets(n * p, p, e);
      if (send && send != recv + off[r]) CopyBytes(recv + off[r], send, off[r + 1] - off[r]);
      return RingAllgather(a, recv, off, all, 0, d);
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      auto off = a.kind == CollectiveKind::kReduceScatterV ? CountOffsets(a.counts, e) : EvenOffsets(n * p, p, e);
      std::vector<std::uint8_t> work(send, send + off[p]);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, work.data(), off[p] / e, a.op.scalar);
      COMMKIT_RETURN_IF_ERROR(RingReduceScatter(a, work.data(), off, plain, all, 0, d));
      CopyBytes(recv, work.data() + off[r], off[r + 1] - off[r]);
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, recv, (off[r + 1] - off[r]) / e, p);
      return Status::Ok();
    }
    case CollectiveKind::kAlltoall: {
      std::vector<std::size_t> c(p, n);
      return Alltoall(a, c, c, d);
    }
    case CollectiveKind::kAlltoallv: return Alltoall(a, a.counts, a.recv_counts, d);
    case CollectiveKind::kGather: {
      std::vector<Op> ops;
      if (r == a.root) {
        for (int q = 0; q < p; ++q)
          if (q != r) ops.push_back(RecvOp(q, recv + q * n * e, n * e));
        if (send && send != recv + r * n * e) CopyBytes(recv + r * n * e, send, n * e);
      } else {
        ops.push_back(SendOp(a.root, send, n * e));
      }
      return t_.Run(ops, 0, a.sequence, 0, d);
    }
    case CollectiveKind::kScatter: {
      std::vector<Op> ops;
      if (r == a.root) {
        for (int q = 0; q < p; ++q)
          if (q != r) ops.push_back(SendOp(q, send + q * n * e, n * e));
        if (recv != send + r * n * e) CopyBytes(recv, send + r * n * e, n * e);
      } else {
        ops.push_back(RecvOp(a.root, recv, n * e));
      }
      return t_.Run(ops, 0, a.sequence, 0, d);
    }
    case CollectiveKind::kBarrier: {
      // Dissemination: after ceil(log2 p) rounds every rank has heard from every other.
      std::uint8_t out = 1, in = 0;
      std::uint32_t step = 0;
      for (int k = 1; k < p; k <<= 1, ++step) {
        std::vector<Op> ops{SendOp((r + k) % p, &out, 1), RecvOp((r - k + p) % p, &in, 1)};
        COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, step, d));
      }
      return Status::Ok();
    }
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv: {
      // The user's 32-bit tag spreads over the sequence (24 bits) and step (8 of 16 bits) fields.
      auto tag = static_cast<std::uint32_t>(a.tag);
      std::vector<Op> ops{a.kind == CollectiveKind::kSend ? SendOp(a.peer, send, n * e) : RecvOp(a.peer, recv, n * e)};
      return t_.Run(ops, 1, tag & 0xFFFFFF, tag >> 24, d);
    }
  }
  return Status::Internal("host backend: unexpected collective");
}

}  // namespace commkit::host
