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
  std::memcpy(recv + roff[r], send + soff[r], soff[r + 1] - soff[r]);
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p, from = (r - s + p) % p;
    std::vector<Op> ops{SendOp(to, send + soff[to], soff[to + 1] - soff[to]),
                        RecvOp(from, recv + roff[from], roff[from + 1] - roff[from])};
    COMMKIT_RETURN_IF_ERROR(t_.Run(ops, 0, a.sequence, static_cast<std::uint32_t>(s), d));
  }
  return Status::Ok();
}

Status RemoteAlgorithms::Run(const CollectiveArgs& a, Deadline d) {
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
      if (n > 0 && in != out) std::memcpy(out, in, n * e);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, out, n, a.op.scalar);
      COMMKIT_RETURN_IF_ERROR(RingAllreduce(a, out, n, plain, all, d));
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, out, n, p);
      return Status::Ok();
    }
    case CollectiveKind::kBroadcast: return n == 0 ? Status::Ok() : Broadcast(a, d);
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAllgatherv: {
      auto off = a.kind == CollectiveKind::kAllgatherv ? CountOffsets(a.counts, e) : EvenOffsets(n * p, p, e);
      if (send && send != recv + off[r]) std::memcpy(recv + off[r], send, off[r + 1] - off[r]);
      return RingAllgather(a, recv, off, all, 0, d);
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      auto off = a.kind == CollectiveKind::kReduceScatterV ? CountOffsets(a.counts, e) : EvenOffsets(n * p, p, e);
      std::vector<std::uint8_t> work(send, send + off[p]);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, work.data(), off[p] / e, a.op.scalar);
      COMMKIT_RETURN_IF_ERROR(RingReduceScatter(a, work.data(), off, plain, all, 0, d));
      std::memcpy(recv, work.data() + off[r], off[r + 1] - off[r]);
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
        if (send && send != recv + r * n * e) std::memcpy(recv + r * n * e, send, n * e);
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
        if (recv != send + r * n * e) std::memcpy(recv, send + r * n * e, n * e);
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
