// The names of commkit's collective algorithms: one vocabulary for the selection table (COMMKIT_TUNE,
// the calibration cache, --plan), the algorithm layer over point-to-point transports, the backends
// and the topology cost model. Each of those accepts only the subset it runs or models and says so
// when given another (tuning.h Algorithms(), algorithms.h, topology::CostModel::Models()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

// The values index per-algorithm arrays (kCollectiveAlgorithms): add new ones at the end.
enum class CollectiveAlgorithm : std::uint8_t {
  // host and mpi backends, ranks on one host: every rank reduces every rank's input from the
  // shared-memory slots (small messages); for the host all-gather, every block is staged through them.
  kFlat,
  // host backend, all-reduce and reduce within a host: each rank reduces its 1/p slice from its input
  // and the peers' slots, then every rank gathers the reduced slices (large messages).
  kSliced,
  // Reduce-scatter then all-gather around a ring: 2(p-1) steps, 2(p-1)/p of the data per rank.
  // All-reduce on gloo, mpi (point-to-point) and host across hosts; the algorithm layer's
  // reduce-scatter and all-gather; modelled by the cost model.
  kRing,
  // ceil(log2 p) exchanges of the whole buffer (latency-bound messages). All-reduce on mpi
  // (point-to-point) and in the algorithm layer; modelled by the cost model.
  kRecursiveDoubling,
  // Rabenseifner: recursive-halving reduce-scatter then recursive-doubling all-gather, 2 log2 p
  // steps with the ring's bytes. All-reduce on gloo, host across hosts and in the algorithm layer;
  // host's hierarchical all-reduce among leaders; modelled by the cost model.
  kHalvingDoubling,
  // host backend, all-reduce across hosts: reduce within each host, all-reduce among the hosts'
  // leaders (ring or halving-doubling), broadcast within each host; modelled by the cost model.
  kHierarchical,
  // gloo backend, all-reduce: Gloo's BCube (groups exchange in log_base(p) rounds).
  kBcube,
  // mpi backend, all-reduce: the MPI library's own collective (MPI_Iallreduce).
  kLibrary,
  // Broadcast in ceil(log2 p) rounds down a binomial tree (algorithm layer; mpi and host across hosts).
  kBinomialTree,
  // Barrier in ceil(log2 p) rounds of zero-byte exchanges (algorithm layer; mpi and host across hosts).
  kDissemination,
  // All-to-all(v): in step s every rank sends to rank+s and receives from rank-s (algorithm layer;
  // host across hosts).
  kPairwise,
  // Gather and scatter: the root exchanges with every rank in turn (algorithm layer; host across hosts).
  kDirect,
  // host backend, all-gather within a host: every rank reads each peer's input straight into its
  // output (process_vm_readv between processes, memcpy between threads of one process), with no
  // staging through the shared-memory slots (large messages whose data leaves the cache).
  kSingleCopy,
};

inline constexpr std::size_t kNumCollectiveAlgorithms = 13;
// Every algorithm, in enumerator order.
inline constexpr std::array<CollectiveAlgorithm, kNumCollectiveAlgorithms> kCollectiveAlgorithms = {
    CollectiveAlgorithm::kFlat,
    CollectiveAlgorithm::kSliced,
    CollectiveAlgorithm::kRing,
    CollectiveAlgorithm::kRecursiveDoubling,
    CollectiveAlgorithm::kHalvingDoubling,
    CollectiveAlgorithm::kHierarchical,
    CollectiveAlgorithm::kBcube,
    CollectiveAlgorithm::kLibrary,
    CollectiveAlgorithm::kBinomialTree,
    CollectiveAlgorithm::kDissemination,
    CollectiveAlgorithm::kPairwise,
    CollectiveAlgorithm::kDirect,
    CollectiveAlgorithm::kSingleCopy,
};

// "flat", "sliced", "ring", "recursive_doubling", "halving_doubling", "hierarchical", "bcube",
// "library", "binomial_tree", "dissemination", "pairwise", "direct", "single_copy" ("?" for a value
// out of range).
std::string_view ToString(CollectiveAlgorithm algorithm);

// The algorithm `name` spells as ToString does, ignoring case and surrounding whitespace; otherwise
// InvalidArgument "unknown algorithm 'NAME' (known: flat, sliced, ...)", NAME shortened and with
// control bytes escaped.
Result<CollectiveAlgorithm> ParseCollectiveAlgorithm(std::string_view name);

}  // namespace commkit
