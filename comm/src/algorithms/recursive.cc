// Recursive doubling and recursive halving-doubling all-reduce. Rank counts that are not a power of
// two fold: among the first 2*rem positions (rem = p - p', p' the largest power of two <= p) each even
// position hands its buffer to the odd one above it and gets the result back at the end. Operands are
// always reduced as (lower positions) op (higher positions), so every rank computes the same bits
// even where the operation is not associative in practice (floating-point sums, NaN in min/max).
#include <algorithm>
#include <utility>

#include "internal.h"

namespace commkit::comm::algorithms::internal {

namespace {

int LargestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace

// log2 p' exchanges of the whole buffer with the partner at distance 1, 2, 4...
Status RecursiveDoubling(Transport& t, const Group& g, const AllreduceArgs& a, Deadline d, std::vector<char>& scratch) {
  char* buf = static_cast<char*>(a.buf);
  const std::size_t bytes = a.count * a.elem_size;
  const int size = g.size(), i = g.index();
  const int pof2 = LargestPowerOfTwo(size), rem = size - pof2;
  if (scratch.size() < bytes) scratch.resize(bytes);
  int v = -1;  // position among the p' participants, -1 when folded away
  if (i < 2 * rem) {
    if (i % 2 == 0) {
      COMMKIT_RETURN_IF_ERROR(SendRecv(t, g.rank(i + 1), buf, bytes, -1, nullptr, 0, d));
    } else {
      COMMKIT_RETURN_IF_ERROR(SendRecv(t, -1, nullptr, 0, g.rank(i - 1), scratch.data(), bytes, d));
      a.reduce(buf, scratch.data(), buf, a.count);
      v = i / 2;
    }
  } else {
    v = i - rem;
  }
  if (v >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int pv = v ^ mask;
      const int peer = g.rank(pv < rem ? pv * 2 + 1 : pv + rem);
      COMMKIT_RETURN_IF_ERROR(SendRecv(t, peer, buf, bytes, peer, scratch.data(), bytes, d));
      if (pv < v) {
        a.reduce(buf, scratch.data(), buf, a.count);
      } else {
        a.reduce(buf, buf, scratch.data(), a.count);
      }
    }
  }
  if (i < 2 * rem) {
    if (i % 2 == 1) return SendRecv(t, g.rank(i - 1), buf, bytes, -1, nullptr, 0, d);
    return SendRecv(t, -1, nullptr, 0, g.rank(i + 1), buf, bytes, d);
  }
  return Status::Ok();
}

// Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling all-gather, among p'
// participants. 2 log2 p' steps instead of the ring's 2(p-1), the same bytes per rank; every element
// is reduced by one rank only.
Status HalvingDoubling(Transport& t, const Group& g, const AllreduceArgs& a, Deadline d, std::vector<char>& scratch) {
  const int n = g.size(), i = g.index();
  const std::size_t e = a.elem_size, count = a.count;
  auto* b = static_cast<char*>(a.buf);
  const int pof2 = LargestPowerOfTwo(n), extra = n - pof2;
  if (i < 2 * extra) {
    const int partner = g.rank(i ^ 1);
    if (i % 2 == 0) {
      COMMKIT_RETURN_IF_ERROR(SendRecv(t, partner, b, count * e, -1, nullptr, 0, d));
      return SendRecv(t, -1, nullptr, 0, partner, b, count * e, d);
    }
    if (scratch.size() < count * e) scratch.resize(count * e);
    COMMKIT_RETURN_IF_ERROR(SendRecv(t, -1, nullptr, 0, partner, scratch.data(), count * e, d));
    a.reduce(b, scratch.data(), b, count);  // the lower position's operand first
  }
  const int v = i < 2 * extra ? i / 2 : i - extra;
  auto real = [&](int w) { return g.rank(w < extra ? 2 * w + 1 : w + extra); };
  const auto off = EvenOffsets(count, pof2, e);
  const auto half = static_cast<std::size_t>(pof2 / 2);
  // The first halving receives the most: one half of the buffer.
  const std::size_t most = std::max(off[half], off[static_cast<std::size_t>(pof2)] - off[half]);
  if (scratch.size() < most) scratch.resize(most);
  // Recursive halving: at distance `mask` keep the half of the current block range that bit `mask`
  // of v selects, send the other half to the partner and reduce its copy of ours.
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // block ranges before each halving
  std::size_t lo = 0, hi = static_cast<std::size_t>(pof2);
  for (int mask = 1; mask < pof2; mask <<= 1) {
    ranges.emplace_back(lo, hi);
    const std::size_t mid = (lo + hi) / 2;
    const bool upper = (v & mask) != 0;
    const std::size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const std::size_t give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
    const std::size_t keep_bytes = off[keep_hi] - off[keep_lo];
    const int partner = real(v ^ mask);
    COMMKIT_RETURN_IF_ERROR(SendRecv(t, partner, b + off[give_lo], off[give_hi] - off[give_lo], partner,
                                     scratch.data(), keep_bytes, d));
    char* mine = b + off[keep_lo];
    if (upper) {
      a.reduce(mine, scratch.data(), mine, keep_bytes / e);
    } else {
      a.reduce(mine, mine, scratch.data(), keep_bytes / e);
    }
    lo = keep_lo;
    hi = keep_hi;
  }
  // Recursive doubling, the halving in reverse: swap the reduced halves until every block is everywhere.
  for (int mask = pof2 / 2; mask >= 1; mask >>= 1) {
    const auto [plo, phi] = ranges.back();
    ranges.pop_back();
    const std::size_t other_lo = lo == plo ? hi : plo, other_hi = lo == plo ? phi : lo;
    const int partner = real(v ^ mask);
    COMMKIT_RETURN_IF_ERROR(SendRecv(t, partner, b + off[lo], off[hi] - off[lo], partner, b + off[other_lo],
                                     off[other_hi] - off[other_lo], d));
    lo = plo;
    hi = phi;
  }
  // Unfold: the folded positions get the result.
  if (i < 2 * extra) return SendRecv(t, g.rank(i ^ 1), b, count * e, -1, nullptr, 0, d);
  return Status::Ok();
}

}  // namespace commkit::comm::algorithms::internal
