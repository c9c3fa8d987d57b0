// Ring reduce-scatter and all-gather: data moves from position i to i+1, p-1 steps each.
#include <algorithm>
#include <limits>

#include "internal.h"

namespace commkit::comm::algorithms::internal {

namespace {

// Bytes of piece `k` of a block of `len` bytes cut into pieces of at most `seg` bytes.
std::size_t PieceBytes(std::size_t len, std::size_t seg, std::size_t k) {
  const std::size_t at = k * seg;
  return len > at ? std::min(seg, len - at) : 0;
}
// A block always moves as at least one message (an empty one too), so both sides count alike.
std::size_t Pieces(std::size_t len, std::size_t seg) { return len == 0 ? 1 : 1 + (len - 1) / seg; }

}  // namespace

// Step s: position i sends block i-s-1 to the right and receives block i-s-2 from the left, reducing
// its own contribution into it; after p-1 steps block i at position i holds everyone's. A block is
// cut into pieces by its own length only, so sender and receiver of a block cut it alike.
Status RingReduceScatter(Transport& t, const Group& g, char* buf, const char* in, std::span<const std::size_t> off,
                         std::size_t esize, ReduceFunction reduce, std::size_t segment_bytes, Deadline d,
                         std::vector<char>& scratch) {
  const int p = g.size(), i = g.index();
  if (p <= 1) return Status::Ok();
  const int right = g.rank((i + 1) % p), left = g.rank((i + p - 1) % p);
  auto len = [&](int b) { return off[static_cast<std::size_t>(b) + 1] - off[static_cast<std::size_t>(b)]; };
  const std::size_t seg = segment_bytes == 0 ? std::numeric_limits<std::size_t>::max()
                                             : std::max(esize, segment_bytes / esize * esize);
  std::size_t biggest = 0;
  for (int b = 0; b < p; ++b) biggest = std::max(biggest, len(b));
  if (scratch.size() < std::min(biggest, seg)) scratch.resize(std::min(biggest, seg));
  for (int s = 0; s + 1 < p; ++s) {
    const int sb = (i - s - 1 + 2 * p) % p, rb = (i - s - 2 + 2 * p) % p;
    const char* from = (s == 0 ? in : buf) + off[static_cast<std::size_t>(sb)];
    const std::size_t ns = Pieces(len(sb), seg), nr = Pieces(len(rb), seg);
    for (std::size_t k = 0; k < std::max(ns, nr); ++k) {
      Message m[2];
      std::size_t n = 0;
      const std::size_t rbytes = PieceBytes(len(rb), seg, k);
      if (k < nr) m[n++] = Message::Recv(left, scratch.data(), rbytes);
      if (k < ns) m[n++] = Message::Send(right, from + k * seg, PieceBytes(len(sb), seg, k));
      COMMKIT_RETURN_IF_ERROR(t.Exchange(std::span<Message>(m, n), d));
      if (rbytes > 0) {
        const std::size_t at = off[static_cast<std::size_t>(rb)] + k * seg;
        reduce(buf + at, scratch.data(), in + at, rbytes / esize);
      }
    }
  }
  return Status::Ok();
}

// Step s: position i sends block i-s to the right and receives block i-s-1 from the left.
Status RingAllgather(Transport& t, const Group& g, char* buf, std::span<const std::size_t> off, Deadline d) {
  const int p = g.size(), i = g.index();
  if (p <= 1) return Status::Ok();
  const int right = g.rank((i + 1) % p), left = g.rank((i + p - 1) % p);
  for (int s = 0; s + 1 < p; ++s) {
    const auto sb = static_cast<std::size_t>((i - s + p) % p), rb = static_cast<std::size_t>((i - s - 1 + 2 * p) % p);
    COMMKIT_RETURN_IF_ERROR(SendRecv(t, right, buf + off[sb], off[sb + 1] - off[sb], left, buf + off[rb],
                                     off[rb + 1] - off[rb], d));
  }
  return Status::Ok();
}

}  // namespace commkit::comm::algorithms::internal
