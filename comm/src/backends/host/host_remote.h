// The host backend's algorithms across hosts, over UCX point-to-point (ucx_transport.h): ring
// reduce-scatter/all-gather/all-reduce, recursive halving-doubling (Rabenseifner) all-reduce, binomial broadcast, pairwise all-to-all, direct gather and
// scatter, dissemination barrier, and send/recv. Ranks are the group's ranks. Private to commkit::comm.
#pragma once

#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "ucx_transport.h"

namespace commkit::host {

class RemoteAlgorithms {
 public:
  using Deadline = UcxTransport::Deadline;
  explicit RemoteAlgorithms(UcxTransport& transport) : t_(transport) {}

  enum class AllreduceAlgorithm : std::uint8_t { kRing, kHalvingDoubling };
  static std::string_view Name(AllreduceAlgorithm a) { return a == AllreduceAlgorithm::kHalvingDoubling ? "halving_doubling" : "ring"; }

  // Every collective of the API, flat over all ranks (all-reduce as `allreduce` says).
  Status Run(const CollectiveArgs& a, Deadline deadline, AllreduceAlgorithm allreduce = AllreduceAlgorithm::kRing);

  // In-place all-reduce of `count` elements at `buf` among `ranks` with the reduction `kind` as is.
  Status Allreduce(AllreduceAlgorithm algorithm, const CollectiveArgs& a, void* buf, std::size_t count, ReduceKind kind,
                   const std::vector<int>& ranks, Deadline deadline);

  // In-place ring all-reduce of `count` elements at `buf` among `ring` (group ranks including this
  // one, in ring order) with the reduction `kind` as is (no AVG division, no PREMUL scaling).
  Status RingAllreduce(const CollectiveArgs& a, void* buf, std::size_t count, ReduceKind kind,
                       const std::vector<int>& ring, Deadline deadline);

  // Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling all-gather, among the
  // largest power of two p' <= ranks.size(); the other ranks first hand their whole buffer to a
  // partner and get the result back at the end. Partners start at distance 1 in `ranks`, so when
  // neighbours share a host the biggest exchanges stay on it. 2 log2(p') steps instead of the ring's
  // 2(p-1), the same bytes per rank. Every element is reduced by one rank only: all ranks get the
  // same bits.
  Status HalvingDoublingAllreduce(const CollectiveArgs& a, void* buf, std::size_t count, ReduceKind kind,
                                  const std::vector<int>& ranks, Deadline deadline);

 private:
  Status RingReduceScatter(const CollectiveArgs& a, std::uint8_t* buf, const std::vector<std::size_t>& off,
                           ReduceKind kind, const std::vector<int>& ring, std::uint32_t step, Deadline d);
  Status RingAllgather(const CollectiveArgs& a, std::uint8_t* buf, const std::vector<std::size_t>& off,
                       const std::vector<int>& ring, std::uint32_t step, Deadline d);
  Status Broadcast(const CollectiveArgs& a, Deadline d);
  Status Alltoall(const CollectiveArgs& a, const std::vector<std::size_t>& send_counts,
                  const std::vector<std::size_t>& recv_counts, Deadline d);

  UcxTransport& t_;
  std::vector<std::uint8_t> scratch_, staging_;
};

}  // namespace commkit::host
