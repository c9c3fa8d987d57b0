// SlotMeeting (slot_meeting.h): a collective's meeting in the shared-memory slots and the results
// computed from every rank's data there.
#include "shm/slot_meeting.h"

#include <algorithm>
#include <cstring>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm {

std::size_t SlotMeeting::SlotBytesFor(int ranks) {
  const std::size_t per_rank = (std::size_t{8} << 20) / static_cast<std::size_t>(std::max(ranks, 1));
  return std::min<std::size_t>(std::size_t{64} << 10, ShmTransport::SlotBytesWithin(per_rank));
}

std::unique_ptr<SlotMeeting> SlotMeeting::Create(std::unique_ptr<ShmTransport> transport, const ShmExchange& exchange,
                                                 std::string_view who, std::string_view library) {
  const int rank = transport->rank();
  std::string why_not;
  auto readable = SingleCopyPossible(exchange, rank, &why_not);
  if (!readable.ok()) why_not = readable.status().message();
  const bool single_copy = readable.ok() && *readable;
  if (!single_copy && rank == 0)
    COMMKIT_LOG_INFO(who, ": broadcasts beyond ", kGatherMaxBytes, " bytes go through ", library,
                     " (the ranks cannot read each other's memory: ", why_not, ")");
  return std::make_unique<SlotMeeting>(std::move(transport), single_copy);
}

Status SlotMeeting::Meet(const CollectiveArgs& a, const void* data, std::size_t bytes, double scale, std::size_t most,
                         Deadline deadline) {
  Close();
  auto slot = t_->Begin(deadline);
  if (!slot.ok()) return slot.status();
  inline_ = std::max(bytes, most) <= ShmTransport::kInlineBytes;
  rot_ = inline_ ? 0 : t_->RotatedOffset(std::max(bytes, most));
  std::uint8_t* mine = inline_ ? t_->InlineData() : *slot + rot_;
  if (bytes > 0) {
    std::memcpy(mine, data, bytes);
    if (scale != 1) ScaleInPlace(a.dtype, mine, bytes / SizeOf(a.dtype), scale);
  }
  input_ = scale == 1 ? data : nullptr;
  t_->Post(a.fingerprint);
  Status s = t_->WaitPosted(deadline);
  if (s.ok()) {
    open_ = true;
  } else if (s.code() == StatusCode::kMismatch) {
    // Seen by every rank in this round: every rank finishes it, and the group stays usable.
    t_->Finish();
  }
  return s;
}

void SlotMeeting::Reduce(const CollectiveArgs& a, std::size_t off, std::size_t n) const {
  if (n == 0) return;
  const ReduceFunction reduce = GetReduceFunction(a.dtype, a.op.kind);  // AVG and PREMUL_SUM: a sum
  const int p = size();
  if (p == 1) {
    std::memcpy(a.recv, Data(0) + off, n * SizeOf(a.dtype));
  } else {
    // (data 0 op data 1) op data 2 ...: the same order, so the same bits, on every rank.
    reduce(a.recv, Data(0) + off, Data(1) + off, n);
    for (int q = 2; q < p; ++q) reduce(a.recv, a.recv, Data(q) + off, n);
  }
  if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, n, p);
}

void SlotMeeting::Gather(const CollectiveArgs& a, std::span<const std::size_t> offsets) const {
  char* out = static_cast<char*>(a.recv);
  const std::size_t block = a.count * SizeOf(a.dtype);
  auto off = [&](int q) { return offsets.empty() ? block * static_cast<std::size_t>(q) : offsets[q]; };
  auto bytes = [&](int q) { return offsets.empty() ? block : offsets[q + 1] - offsets[q]; };
  // This rank's block from its input, first: an input at the buffer's start (send == recv) is
  // overwritten by rank 0's block next.
  const bool own = input_ != nullptr;
  if (own && bytes(rank()) > 0 && out + off(rank()) != input_) std::memmove(out + off(rank()), input_, bytes(rank()));
  for (int q = 0; q < size(); ++q)
    if (bytes(q) > 0 && (q != rank() || !own)) std::memcpy(out + off(q), Data(q), bytes(q));
}

void SlotMeeting::Broadcast(const CollectiveArgs& a) const {
  if (rank() != a.root) std::memcpy(a.recv, Data(a.root), a.count * SizeOf(a.dtype));
}

Status SlotMeeting::ReleaseAfterReads(Status read, std::size_t bytes, Deadline deadline) {
  t_->SignalReduced();
  if (Status waited = t_->WaitReduced(deadline, -1, ShmTransport::ReadTime(bytes)); !waited.ok()) {
    open_ = false;  // the transport told the peers; the round is abandoned, not finished
    return waited;
  }
  Close();
  return read;
}

Status SlotMeeting::ReadBroadcast(const CollectiveArgs& a, Deadline deadline) {
  Status read = Status::Ok();
  if (rank() != a.root && a.count > 0) {
    PeerBuffer root;
    std::memcpy(&root, Data(a.root), sizeof root);
    read = ReadPeer(root, a.recv, a.count * SizeOf(a.dtype));
    if (!read.ok())
      read = Status(read.code(), StrCat("broadcast #", a.sequence, ": rank ", rank(), " reading root ", a.root,
                                        "'s buffer: ", read.message()));
  }
  return ReleaseAfterReads(std::move(read), a.count * SizeOf(a.dtype), deadline);
}

const void* SlotMeeting::GatherInput(const CollectiveArgs& a, std::span<const std::size_t> offsets, int rank) {
  char* out = static_cast<char*>(a.recv);
  char* mine = out + offsets[rank];
  const std::size_t bytes = offsets[rank + 1] - offsets[rank];
  const char* in = a.send != nullptr ? static_cast<const char*>(a.send) : mine;
  if (in != mine && bytes > 0 && in < out + offsets.back() && out < in + bytes) {
    std::memmove(mine, in, bytes);
    return mine;
  }
  return in;
}

std::size_t SlotMeeting::LargestGatherBlock(const CollectiveArgs& a) {
  if (a.kind != CollectiveKind::kAllgatherv) return a.count * SizeOf(a.dtype);
  return a.counts.empty() ? 0 : *std::max_element(a.counts.begin(), a.counts.end()) * SizeOf(a.dtype);
}

void SlotMeeting::GatherOffsets(const CollectiveArgs& a, int size, std::vector<std::size_t>& into) {
  if (a.kind == CollectiveKind::kAllgatherv) {
    algorithms::CountOffsets(a.counts, SizeOf(a.dtype), into);
    return;
  }
  into.resize(static_cast<std::size_t>(size) + 1);
  for (std::size_t q = 0; q < into.size(); ++q) into[q] = a.count * SizeOf(a.dtype) * q;
}

Status SlotMeeting::ReadGather(const CollectiveArgs& a, const void* input, std::span<const std::size_t> offsets,
                               Deadline deadline) {
  char* out = static_cast<char*>(a.recv);
  Status read = Status::Ok();
  std::size_t total = 0;
  for (int q = 0; q < size(); ++q) {
    const std::size_t bytes = offsets[q + 1] - offsets[q];
    total += bytes;
    if (bytes == 0 || !read.ok()) continue;
    if (q == rank()) {
      if (out + offsets[q] != input) std::memcpy(out + offsets[q], input, bytes);
      continue;
    }
    PeerBuffer peer;
    std::memcpy(&peer, Data(q), sizeof peer);
    read = ReadPeer(peer, out + offsets[q], bytes);
    if (!read.ok())
      read = Status(read.code(), StrCat(ToString(a.kind), " #", a.sequence, ": rank ", rank(), " reading rank ", q,
                                        "'s block: ", read.message()));
  }
  return ReleaseAfterReads(std::move(read), total, deadline);
}

}  // namespace commkit::comm
