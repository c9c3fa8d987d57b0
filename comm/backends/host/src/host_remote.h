// The host backend's collectives across hosts: every collective of the API mapped onto the algorithm
// layer (commkit/comm/algorithms/) over UCX point-to-point (ucx_transport.h), plus send/recv on UCX
// directly. Ranks are the group's ranks. Private to commkit::comm; built when COMMKIT_HAVE_UCX.
#pragma once

#include <vector>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/comm/backend.h"
#include "ucx_transport.h"

namespace commkit::comm::host {

class RemoteCollectives {
 public:
  using Deadline = UcxTransport::Deadline;
  explicit RemoteCollectives(UcxTransport& transport) : t_(transport) {}

  // Every collective of the API, flat over all ranks; the all-reduce (and reduce) runs as `allreduce`
  // says (ring, recursive doubling or halving-doubling), in whole blocks per message.
  Status Run(const CollectiveArgs& a, Deadline deadline, CollectiveAlgorithm allreduce);

  // In-place all-reduce of `count` elements at `buf` among `ranks` (group ranks including this one,
  // in algorithm order) with the reduction `kind` as is (no AVG division, no PREMUL scaling).
  Status Allreduce(CollectiveAlgorithm algorithm, const CollectiveArgs& a, void* buf, std::size_t count,
                   ReduceKind kind, const std::vector<int>& ranks, Deadline deadline);

 private:
  UcxTransport& t_;
  std::vector<char> scratch_;
  std::vector<std::uint8_t> staging_;
};

}  // namespace commkit::comm::host
