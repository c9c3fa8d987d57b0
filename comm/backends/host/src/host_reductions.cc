// The host backend's reductions within a host (host_engine.h): the flat and sliced all-reduce and
// reduce, and the reduce-scatter.
#include <algorithm>
#include <cstring>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/strings.h"
#include "host_engine.h"

namespace commkit::comm::host {

void HostBackend::ReduceAll(const CollectiveArgs& a, void* out, const std::vector<const std::uint8_t*>& src, std::size_t offset,
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

void HostBackend::ReduceWithPeers(ReduceFunction fn, std::uint8_t* dst, const std::uint8_t* own, std::size_t at, std::size_t n) {
  bool first = true;
  for (int q = 0; q < P(); ++q) {
    if (q == me()) continue;
    fn(dst, first ? own : dst, t_->Peer(q) + at, n);
    first = false;
  }
}

const std::uint8_t* HostBackend::OwnOperand(const CollectiveArgs& a, const std::uint8_t* own, std::uint8_t* staging, std::size_t n) {
  if (a.op.kind != ReduceKind::kPreMulSum) return own;
  std::memcpy(staging, own, n * SizeOf(a.dtype));
  ScaleInPlace(a.dtype, staging, n, a.op.scalar);
  return staging;
}

Status HostBackend::Reduction(const CollectiveArgs& a, Deadline d, int root) {
  const std::size_t e = SizeOf(a.dtype), bytes = a.count * e;
  const auto* in = static_cast<const std::uint8_t*>(a.send ? a.send : a.recv);
  // Flat or sliced: the selection table's choice (tuning.h).
  const CollectiveAlgorithm chosen = P() > 1 ? table_.Select(a.kind, MemoryKind::kHost, bytes).algorithm
                                             : CollectiveAlgorithm::kFlat;
  // Reading peers needs every rank able to (checked at creation); PREMUL_SUM scales staged inputs.
  if (chosen == CollectiveAlgorithm::kSingleCopy && single_copy_ && root < 0 && a.op.kind != ReduceKind::kPreMulSum) {
    tune::NoteRun("host", CollectiveAlgorithm::kSingleCopy);
    return SingleCopyAllreduce(a, d, in);
  }
  const bool sliced = chosen == CollectiveAlgorithm::kSliced || chosen == CollectiveAlgorithm::kSingleCopy;
  tune::NoteRun("host", sliced ? CollectiveAlgorithm::kSliced : CollectiveAlgorithm::kFlat);
  if (sliced) return Sliced(a, d, in, root);
  auto* out = static_cast<std::uint8_t*>(a.recv);
  COMMKIT_RETURN_IF_ERROR(Exchange(a, d, in, Uniform(bytes), [&](std::size_t lo, const auto& src) {
    if (root < 0 || me() == root) ReduceAll(a, out + lo, src, 0, std::min(t_->slot_bytes(), bytes - lo) / e);
  }));
  if (a.op.kind == ReduceKind::kAvg && P() > 1 && (root < 0 || me() == root)) DivideInPlace(a.dtype, out, a.count, P());
  return Status::Ok();
}

Status HostBackend::Sliced(const CollectiveArgs& a, Deadline d, const std::uint8_t* in, int root) {
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

Status HostBackend::SingleCopyAllreduce(const CollectiveArgs& a, Deadline d, const std::uint8_t* in) {
  const std::size_t e = SizeOf(a.dtype), n = a.count, p = static_cast<std::size_t>(P());
  auto* out = static_cast<std::uint8_t*>(a.recv);
  // Slices on whole 64-byte lines where the buffer allows, so that no two ranks write one line.
  const std::size_t line = std::max<std::size_t>(1, 64 / e);
  std::vector<std::size_t>& off = offsets_;
  off.assign(p + 1, 0);
  for (std::size_t q = 1; q < p; ++q) off[q] = std::min(n, (n * q / p + line - 1) / line * line) * e;
  off[p] = n * e;
  const std::size_t lo = off[me()], hi = off[me() + 1];
  COMMKIT_RETURN_IF_ERROR(AnnounceBuffer(a, d, in));
  Status read = Status::Ok();
  ReduceFunction fn = Fn(a);
  // Blocks that stay in L2 between the read and the reduction.
  const std::size_t block = std::size_t{256} << 10;
  if (read_.size() < block) read_.resize(block);
  for (std::size_t b = lo; b < hi && read.ok(); b += block) {
    const std::size_t len = std::min(block, hi - b);
    bool first = true;
    for (int q = 0; q < P() && read.ok(); ++q) {
      if (q == me()) continue;
      PeerBuffer peer = Announced(q);
      peer.address += b;
      read = ReadPeer(peer, read_.data(), len);
      if (!read.ok()) break;
      fn(out + b, first ? in + b : out + b, read_.data(), len / e);
      first = false;
    }
    if (a.op.kind == ReduceKind::kAvg && read.ok()) DivideInPlace(a.dtype, out + b, len / e, P());
  }
  if (!read.ok())
    read = Status(read.code(), StrCat("host backend: single-copy all-reduce: rank ", me(), " reading a peer's input: ",
                                      read.message(), " (COMMKIT_TUNE=host.allreduce:*:sliced stages through shared memory)"));
  // Every peer is done reading this rank's input and its slice of the output is final.
  t_->SignalReduced();
  COMMKIT_RETURN_IF_ERROR(t_->WaitReduced(d, -1, ShmTransport::ReadTime(hi - lo)));
  t_->Finish();
  // A rank whose read failed still takes part in the gather's round (the peers wait for it there),
  // then reports its failure.
  std::vector<std::size_t>& bytes = Blocks(0);
  for (std::size_t q = 0; q < p; ++q) bytes[q] = off[q + 1] - off[q];
  Status gathered = SingleCopyGather(a, d, out + lo, bytes, off, true);
  return read.ok() ? gathered : read;
}

Status HostBackend::ReduceScatterPieces(const CollectiveArgs& a, Deadline d, const std::vector<std::size_t>& counts) {
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

}  // namespace commkit::comm::host
