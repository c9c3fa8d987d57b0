#include "p2p_collectives.h"

#include <algorithm>
#include <cstring>

namespace commkit {

namespace {

// Element offset of chunk `i` when `count` elements are cut into `p` chunks (the first count % p one longer).
std::size_t ChunkOffset(std::size_t count, int p, int i) {
  const std::size_t base = count / static_cast<std::size_t>(p), extra = count % static_cast<std::size_t>(p);
  const std::size_t ui = static_cast<std::size_t>(i);
  return base * ui + std::min(ui, extra);
}

Status RecursiveDoubling(P2pTransport& t, int rank, int size, const P2pAllreduceArgs& a, char* scratch) {
  char* buf = static_cast<char*>(a.buf);
  const std::size_t bytes = a.count * a.elem_size;
  int pof2 = 1;
  while (pof2 * 2 <= size) pof2 *= 2;
  const int rem = size - pof2;
  // Fold: among the first 2*rem ranks, each even rank hands its data to the odd rank above it and
  // waits for the result. Operands are always reduced as (lower ranks) op (higher ranks), so every
  // rank computes bitwise the same value even for non-associative-in-practice cases (NaN in min/max).
  int newrank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      COMMKIT_RETURN_IF_ERROR(t.SendRecv(rank + 1, buf, bytes, -1, nullptr, 0));
      newrank = -1;
    } else {
      COMMKIT_RETURN_IF_ERROR(t.SendRecv(-1, nullptr, 0, rank - 1, scratch, bytes));
      a.reduce(buf, scratch, buf, a.count);
      newrank = rank / 2;
    }
  } else {
    newrank = rank - rem;
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int newpeer = newrank ^ mask;
      const int peer = newpeer < rem ? newpeer * 2 + 1 : newpeer + rem;
      COMMKIT_RETURN_IF_ERROR(t.SendRecv(peer, buf, bytes, peer, scratch, bytes));
      if (newpeer < newrank) {
        a.reduce(buf, scratch, buf, a.count);
      } else {
        a.reduce(buf, buf, scratch, a.count);
      }
    }
  }
  if (rank < 2 * rem) {
    if (rank % 2 == 1) return t.SendRecv(rank - 1, buf, bytes, -1, nullptr, 0);
    return t.SendRecv(-1, nullptr, 0, rank + 1, buf, bytes);
  }
  return Status::Ok();
}

// Out of place without a copy of the input: every chunk of the input is read exactly once (sent at
// step 0, or reduced into `buf` in a later step), and the chunk this rank sends first is overwritten
// by the allgather.
Status Ring(P2pTransport& t, int rank, int size, const P2pAllreduceArgs& a, char* scratch) {
  char* buf = static_cast<char*>(a.buf);
  const char* in = a.in != nullptr ? static_cast<const char*>(a.in) : buf;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto off = [&](int i) { return ChunkOffset(a.count, size, i); };
  auto len = [&](int i) { return off(i + 1) - off(i); };
  // Reduce-scatter: after p-1 steps this rank holds the full reduction of chunk (rank+1) % p.
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank - s + size) % size, recv = (rank - s - 1 + 2 * size) % size;
    // In segments, so each received piece is reduced while it is still in cache.
    const char* from = (s == 0 ? in : buf) + off(send) * a.elem_size;
    const std::size_t seg = std::max<std::size_t>(1, a.segment_bytes / a.elem_size);
    for (std::size_t done = 0; done < std::max(len(send), len(recv)); done += seg) {
      const std::size_t ns = len(send) > done ? std::min(seg, len(send) - done) : 0;
      const std::size_t nr = len(recv) > done ? std::min(seg, len(recv) - done) : 0;
      COMMKIT_RETURN_IF_ERROR(
          t.SendRecv(right, from + done * a.elem_size, ns * a.elem_size, left, scratch, nr * a.elem_size));
      const std::size_t at = (off(recv) + done) * a.elem_size;
      if (nr) a.reduce(buf + at, scratch, in + at, nr);
    }
  }
  // Allgather: pass the reduced chunks around the ring, straight into `buf`.
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank - s + 1 + size) % size, recv = (rank - s + size) % size;
    COMMKIT_RETURN_IF_ERROR(t.SendRecv(right, buf + off(send) * a.elem_size, len(send) * a.elem_size, left,
                                       buf + off(recv) * a.elem_size, len(recv) * a.elem_size));
  }
  return Status::Ok();
}

}  // namespace

Status P2pAllreduce(P2pTransport& t, int rank, int size, const P2pAllreduceArgs& a, std::vector<char>& scratch) {
  if (a.count == 0) return Status::Ok();
  if (size <= 1) {
    if (a.in != nullptr && a.in != a.buf) std::memcpy(a.buf, a.in, a.count * a.elem_size);
    return Status::Ok();
  }
  const std::size_t bytes = a.count * a.elem_size;
  const bool ring = bytes > a.ring_min_bytes && a.count >= static_cast<std::size_t>(size);
  if (!ring && a.in != nullptr && a.in != a.buf) std::memcpy(a.buf, a.in, bytes);
  // The ring receives at most one chunk at a time; recursive doubling a whole buffer.
  const std::size_t need =
      ring ? std::min(ChunkOffset(a.count, size, 1) * a.elem_size, std::max(a.segment_bytes, a.elem_size)) : bytes;
  if (scratch.size() < need) scratch.resize(need);
  return ring ? Ring(t, rank, size, a, scratch.data()) : RecursiveDoubling(t, rank, size, a, scratch.data());
}

Status P2pBroadcast(P2pTransport& t, int rank, int size, int root, void* buf, std::size_t bytes) {
  if (size <= 1) return Status::Ok();
  const int vr = (rank - root + size) % size;
  int mask = 1;
  while (mask < size) {
    if (vr & mask) {
      COMMKIT_RETURN_IF_ERROR(t.SendRecv(-1, nullptr, 0, (vr - mask + root) % size, buf, bytes));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < size) COMMKIT_RETURN_IF_ERROR(t.SendRecv((vr + mask + root) % size, buf, bytes, -1, nullptr, 0));
  }
  return Status::Ok();
}

Status P2pBarrier(P2pTransport& t, int rank, int size) {
  char dummy = 0;
  for (int k = 1; k < size; k <<= 1)
    COMMKIT_RETURN_IF_ERROR(t.SendRecv((rank + k) % size, &dummy, 0, (rank - k + size) % size, &dummy, 0));
  return Status::Ok();
}

}  // namespace commkit
