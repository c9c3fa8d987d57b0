// Choices, offsets, block copies and the all-reduce entry of the algorithm layer.
#include <algorithm>
#include <cstring>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/common/strings.h"
#include "internal.h"

namespace commkit::comm::algorithms {

std::optional<AlgorithmChoice> AllreduceChoice(const tune::Choice& choice, std::size_t count, int ranks) {
  AlgorithmChoice c;
  switch (choice.algorithm) {
    case CollectiveAlgorithm::kRing:
    case CollectiveAlgorithm::kRecursiveDoubling:
    case CollectiveAlgorithm::kHalvingDoubling: c.algorithm = choice.algorithm; break;
    default: return std::nullopt;
  }
  if (c.algorithm == CollectiveAlgorithm::kRing && count < static_cast<std::size_t>(std::max(ranks, 1)))
    c.algorithm = CollectiveAlgorithm::kRecursiveDoubling;
  if (choice.params.segment_bytes != 0) c.segment_bytes = choice.params.segment_bytes;
  return c;
}

Group::Group(std::vector<int> ranks, int rank)
    : ranks_(std::move(ranks)), index_(-1), size_(static_cast<int>(ranks_.size())) {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  if (it != ranks_.end()) index_ = static_cast<int>(it - ranks_.begin());
}

std::vector<std::size_t> EvenOffsets(std::size_t count, int parts, std::size_t elem_size) {
  const auto n = static_cast<std::size_t>(std::max(parts, 1));
  std::vector<std::size_t> off(n + 1);
  for (std::size_t i = 0; i <= n; ++i) off[i] = count * i / n * elem_size;
  return off;
}

void CountOffsets(std::span<const std::size_t> counts, std::size_t elem_size, std::vector<std::size_t>& off) {
  off.assign(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i] * elem_size;
}

std::vector<std::size_t> CountOffsets(std::span<const std::size_t> counts, std::size_t elem_size) {
  std::vector<std::size_t> off;
  CountOffsets(counts, elem_size, off);
  return off;
}

void CopyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

namespace internal {

Status SendRecv(Transport& t, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, Deadline deadline) {
  Message m[2];
  std::size_t n = 0;
  // Receive first: a transport that posts in order then has the receive waiting for the peer's send.
  if (from >= 0) m[n++] = Message::Recv(from, recv, recv_bytes);
  if (to >= 0) m[n++] = Message::Send(to, send, send_bytes);
  return t.Exchange(std::span<Message>(m, n), deadline);
}

Status CheckAlgorithm(std::string_view collective, const AlgorithmChoice& choice,
                      std::initializer_list<CollectiveAlgorithm> allowed) {
  std::vector<std::string> names;
  for (CollectiveAlgorithm a : allowed) {
    if (a == choice.algorithm) return Status::Ok();
    names.emplace_back(ToString(a));
  }
  return Status::InvalidArgument(StrCat(collective, " has no algorithm '", ToString(choice.algorithm), "' (it runs as ",
                                        Join(names, " or "), ")"));
}

}  // namespace internal

Status Allreduce(Transport& t, const Group& group, const AllreduceArgs& a, const AlgorithmChoice& choice,
                 Deadline deadline, std::vector<char>& scratch) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm(
      "all-reduce", choice,
      {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kRecursiveDoubling, CollectiveAlgorithm::kHalvingDoubling}));
  if (group.index() < 0) return Status::InvalidArgument("all-reduce: this rank is not in the group");
  if (a.count == 0) return Status::Ok();
  const std::size_t bytes = a.count * a.elem_size;
  const bool out_of_place = a.in != nullptr && a.in != a.buf;
  if (group.size() <= 1) {
    if (out_of_place) std::memcpy(a.buf, a.in, bytes);
    return Status::Ok();
  }
  if (choice.algorithm == CollectiveAlgorithm::kRing) {
    // Out of place without a copy of the input: every block of the input is read exactly once (sent
    // at step 0 or reduced into `buf` later), and the block sent first is overwritten by the all-gather.
    const auto off = EvenOffsets(a.count, group.size(), a.elem_size);
    char* buf = static_cast<char*>(a.buf);
    COMMKIT_RETURN_IF_ERROR(internal::RingReduceScatter(t, group, buf, out_of_place ? static_cast<const char*>(a.in) : buf,
                                                        off, a.elem_size, a.reduce, choice.segment_bytes, deadline,
                                                        scratch));
    return internal::RingAllgather(t, group, buf, off, deadline);
  }
  if (out_of_place) std::memcpy(a.buf, a.in, bytes);
  AllreduceArgs in_place = a;
  in_place.in = nullptr;
  return choice.algorithm == CollectiveAlgorithm::kRecursiveDoubling
             ? internal::RecursiveDoubling(t, group, in_place, deadline, scratch)
             : internal::HalvingDoubling(t, group, in_place, deadline, scratch);
}

Status ReduceScatter(Transport& t, const Group& group, void* buf, std::span<const std::size_t> offsets,
                     std::size_t elem_size, ReduceFunction reduce, const AlgorithmChoice& choice, Deadline deadline,
                     std::vector<char>& scratch) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("reduce-scatter", choice, {CollectiveAlgorithm::kRing}));
  if (group.index() < 0) return Status::InvalidArgument("reduce-scatter: this rank is not in the group");
  if (offsets.size() != static_cast<std::size_t>(group.size()) + 1)
    return Status::InvalidArgument(StrCat("reduce-scatter: ", offsets.size(), " offsets for ", group.size(),
                                          " ranks (give one more than ranks)"));
  char* b = static_cast<char*>(buf);
  return internal::RingReduceScatter(t, group, b, b, offsets, elem_size, reduce, choice.segment_bytes, deadline, scratch);
}

Status Allgather(Transport& t, const Group& group, void* buf, std::span<const std::size_t> offsets,
                 const AlgorithmChoice& choice, Deadline deadline) {
  COMMKIT_RETURN_IF_ERROR(internal::CheckAlgorithm("all-gather", choice, {CollectiveAlgorithm::kRing}));
  if (group.index() < 0) return Status::InvalidArgument("all-gather: this rank is not in the group");
  if (offsets.size() != static_cast<std::size_t>(group.size()) + 1)
    return Status::InvalidArgument(StrCat("all-gather: ", offsets.size(), " offsets for ", group.size(),
                                          " ranks (give one more than ranks)"));
  return internal::RingAllgather(t, group, static_cast<char*>(buf), offsets, deadline);
}

}  // namespace commkit::comm::algorithms
