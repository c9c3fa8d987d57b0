// Personalised exchanges: pairwise all-to-all(v), direct gather and scatter.
#include <vector>

#include "commkit/common/strings.h"
#include "internal.h"

namespace commkit::comm::algorithms {

namespace {

Status CheckOffsets(std::string_view what, std::span<const std::size_t> off, int p) {
  if (off.size() == static_cast<std::size_t>(p) + 1) return Status::Ok();
  return Status::InvalidArgument(StrCat("all-to-all: ", off.size(), " ", what, " offsets for ", p,
                                        " ranks (give one more than ranks)"));
}

}  // namespace

Status Alltoall(Transport& t, const Group& g, const void* send, std::span<const std::size_t> soff, void* recv,
                std::span<const std::size_t> roff, const AlgorithmChoice& choice, Deadline d) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("all-to-all", choice, {CollectiveAlgorithm::kPairwise}));
  const int p = g.size(), r = g.index();
  if (r < 0) return Status::InvalidArgument("all-to-all: this rank is not in the group");
  COMMKIT_RETURN_IF_ERROR(CheckOffsets("send", soff, p));
  COMMKIT_RETURN_IF_ERROR(CheckOffsets("receive", roff, p));
  const auto me = static_cast<std::size_t>(r);
  if (soff[me + 1] - soff[me] != roff[me + 1] - roff[me])
    return Status::InvalidArgument(StrCat("alltoallv: rank ", g.rank(r), " sends ", soff[me + 1] - soff[me],
                                          " bytes to itself but expects ", roff[me + 1] - roff[me]));
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  CopyBytes(out + roff[me], in + soff[me], soff[me + 1] - soff[me]);
  // Step s: send to position r+s while receiving from r-s; every pair meets in exactly one step.
  for (int s = 1; s < p; ++s) {
    const auto to = static_cast<std::size_t>((r + s) % p), from = static_cast<std::size_t>((r - s + p) % p);
    COMMKIT_RETURN_IF_ERROR(internal::SendRecv(t, g.rank(static_cast<int>(to)), in + soff[to], soff[to + 1] - soff[to],
                                               g.rank(static_cast<int>(from)), out + roff[from],
                                               roff[from + 1] - roff[from], d));
  }
  return Status::Ok();
}

Status Gather(Transport& t, const Group& g, int root, const void* send, void* recv, std::size_t block,
              const AlgorithmChoice& choice, Deadline d) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("gather", choice, {CollectiveAlgorithm::kDirect}));
  const int p = g.size(), r = g.index();
  if (r < 0 || root < 0 || root >= p) return Status::InvalidArgument("gather: this rank or the root is not in the group");
  if (r != root) {
    Message m = Message::Send(g.rank(root), send, block);
    return t.Exchange(std::span<Message>(&m, 1), d);
  }
  auto* out = static_cast<char*>(recv);
  std::vector<Message> recvs;
  for (int q = 0; q < p; ++q)
    if (q != r) recvs.push_back(Message::Recv(g.rank(q), out + static_cast<std::size_t>(q) * block, block));
  if (send != nullptr) CopyBytes(out + static_cast<std::size_t>(r) * block, send, block);
  if (recvs.empty()) return Status::Ok();
  return t.Exchange(recvs, d);
}

Status Scatter(Transport& t, const Group& g, int root, const void* send, void* recv, std::size_t block,
               const AlgorithmChoice& choice, Deadline d) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("scatter", choice, {CollectiveAlgorithm::kDirect}));
  const int p = g.size(), r = g.index();
  if (r < 0 || root < 0 || root >= p) return Status::InvalidArgument("scatter: this rank or the root is not in the group");
  if (r != root) {
    Message m = Message::Recv(g.rank(root), recv, block);
    return t.Exchange(std::span<Message>(&m, 1), d);
  }
  const auto* in = static_cast<const char*>(send);
  std::vector<Message> sends;
  for (int q = 0; q < p; ++q)
    if (q != r) sends.push_back(Message::Send(g.rank(q), in + static_cast<std::size_t>(q) * block, block));
  CopyBytes(recv, in + static_cast<std::size_t>(r) * block, block);
  if (sends.empty()) return Status::Ok();
  return t.Exchange(sends, d);
}

}  // namespace commkit::comm::algorithms
