// The gloo backend's reduce-scatter: a ring over Gloo's unbound buffers. Gloo's only reduce-scatter,
// the old ReduceScatterHalvingDoubling, overwrites its buffer while its own sends from it may still be
// in flight (docs/gloo-algorithms.md), and an all-reduce moves twice the data.
#include <gloo/transport/unbound_buffer.h>

#include <numeric>

#include "gloo_internal.h"

namespace commkit::comm::gloo {

void RingReduceScatter(::gloo::Context& context, char* work, char* tmp, const std::vector<std::size_t>& counts,
                       std::size_t elem_size, ReduceFunction fn, std::uint64_t slot, std::chrono::milliseconds timeout) {
  const int p = context.size, r = context.rank;
  if (p < 2) return;
  std::vector<std::size_t> offset(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offset.begin() + 1);
  std::size_t largest = 0;
  for (std::size_t c : counts) largest = std::max(largest, c);
  auto out = context.createUnboundBuffer(work, offset.back() * elem_size);
  auto in = context.createUnboundBuffer(tmp, std::max<std::size_t>(largest, 1) * elem_size);
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  // Step s sends block r-s-1 (the one reduced in step s-1) to the next rank and reduces block r-s-2,
  // received from the previous rank, into `work`: after p-1 steps block r holds every rank's
  // contribution. A block is sent only after its last reduction here, and never changed afterwards;
  // every send is waited for, so `work` may be reused as soon as this returns.
  for (int s = 0; s < p - 1; ++s) {
    const auto send_block = static_cast<std::size_t>(((r - s - 1) % p + p) % p);
    const auto recv_block = static_cast<std::size_t>(((r - s - 2) % p + p) % p);
    const std::size_t recv_n = counts[recv_block];
    if (recv_n > 0) in->recv(prev, slot, 0, recv_n * elem_size);
    if (counts[send_block] > 0)
      out->send(next, slot, offset[send_block] * elem_size, counts[send_block] * elem_size);
    if (recv_n > 0) {
      in->waitRecv(timeout);
      char* dst = work + offset[recv_block] * elem_size;
      fn(dst, dst, tmp, recv_n);
    }
    if (counts[send_block] > 0) out->waitSend(timeout);
  }
}

}  // namespace commkit::comm::gloo
