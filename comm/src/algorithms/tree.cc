// Binomial-tree broadcast and dissemination barrier.
#include <vector>

#include "internal.h"

namespace commkit::comm::algorithms {

Status Broadcast(Transport& t, const Group& g, int root, void* buf, std::size_t bytes, const AlgorithmChoice& choice,
                 Deadline d) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("broadcast", choice, {CollectiveAlgorithm::kBinomialTree}));
  const int p = g.size();
  if (g.index() < 0 || root < 0 || root >= p)
    return Status::InvalidArgument("broadcast: this rank or the root is not in the group");
  if (p <= 1) return Status::Ok();
  // Positions relative to the root: v receives from v minus its lowest set bit, then sends to v + 2^k
  // for every 2^k below that bit (all at once).
  const int v = (g.index() - root + p) % p;
  auto real = [&](int rel) { return g.rank((rel + root) % p); };
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      COMMKIT_RETURN_IF_ERROR(internal::SendRecv(t, -1, nullptr, 0, real(v - mask), buf, bytes, d));
      break;
    }
    mask <<= 1;
  }
  std::vector<Message> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) sends.push_back(Message::Send(real(v + mask), buf, bytes));
  if (sends.empty()) return Status::Ok();
  return t.Exchange(sends, d);
}

Status Barrier(Transport& t, const Group& g, const AlgorithmChoice& choice, Deadline d) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("barrier", choice, {CollectiveAlgorithm::kDissemination}));
  const int p = g.size(), i = g.index();
  if (i < 0) return Status::InvalidArgument("barrier: this rank is not in the group");
  // After ceil(log2 p) rounds every rank has heard, directly or not, from every other.
  char dummy = 0;
  for (int k = 1; k < p; k <<= 1)
    COMMKIT_RETURN_IF_ERROR(internal::SendRecv(t, g.rank((i + k) % p), &dummy, 0, g.rank((i - k + p) % p), &dummy, 0, d));
  return Status::Ok();
}

}  // namespace commkit::comm::algorithms
