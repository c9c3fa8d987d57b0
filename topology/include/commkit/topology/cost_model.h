// Alpha-beta cost model for all-reduce: predicted time and bus bandwidth per algorithm and size.
//
// Every link class has a latency alpha (seconds per message step) and a bandwidth beta (bytes/s).
// With p ranks, n bytes, g ranks per node and N nodes (p = g*N):
//   ring               T = 2(p-1)*a + 2(p-1)/p * n / b           a,b: slowest link the ring crosses
//   recursive doubling T = ceil(log2 p) * (a + n / b)            (latency-optimal; also NCCL's tree regime)
//   halving-doubling   T = 2 log2(p')*a + 2(p'-1)/p' * n / b      Rabenseifner: recursive-halving reduce-
//                          [+ 2(a + n/b) when p' < p]             scatter, recursive-doubling all-gather;
//                                                                 p' = largest power of two <= p (the
//                                                                 extra ranks fold in and out)
//   hierarchical       T = 2[(g-1)*a_i + (g-1)/g * n / b_i]      intra-node reduce-scatter + all-gather
//                        + 2(N-1)*a_n + 2(N-1)/N * n / B_n       inter-node ring on n/g per rank, the g
//                                                                 shards sharing the node's NIC bandwidth B_n
//                                                                 (or halving-doubling among the N nodes
//                                                                 where its formula is smaller)
// algbw = n / T and busbw = algbw * 2(p-1)/p (NCCL's definition), so for large n the ring's busbw tends
// to b. The model ignores protocol overheads (LL/LL128/Simple), channel counts and congestion: it is for
// choosing and sanity-checking, not for promising numbers. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/collective_algorithm.h"
#include "commkit/common/status.h"

namespace commkit::topology {

enum class LinkClass : std::uint8_t { kNVLink, kPCIe, kSHM, kNetwork, kLoopback };
std::string_view ToString(LinkClass c);

struct LinkCost {
  LinkClass link = LinkClass::kPCIe;
  double alpha_s = 0;       // per-step latency, seconds
  double beta_Bps = 0;      // bandwidth, bytes per second (per direction)
  std::string derivation;   // where the numbers came from ("4x NVLink4 links x 25 GB/s")
};

// Typical per-class defaults (documented in docs/topology.md), used when the topology gives no number.
LinkCost DefaultLinkCost(LinkClass link);
// A network link from the NIC line rate (Mb/s, as /sys/class/net/X/speed or an IB rate * 1000):
// beta = 0.9 * rate/8 (protocol overhead), alpha 5 us (RDMA) or 25 us (TCP sockets).
LinkCost NetworkLinkCost(double rate_mbps, bool rdma);
// PCIe from generation and width: per-lane GT/s with 128b/130b (gen3+) or 8b/10b coding, 0.8 efficiency.
LinkCost PCIeLinkCost(int generation, int width);
// NVLink from the number of active links and the GPU generation's per-link GB/s (per direction).
LinkCost NVLinkLinkCost(int links, double per_link_GBps);

struct ClusterShape {
  int nodes = 1;
  int ranks_per_node = 1;
  LinkCost intra;    // between ranks of one node (NVLink, PCIe, SHM)
  LinkCost inter;    // between nodes: the node's aggregate NIC bandwidth
  int ranks() const { return nodes * ranks_per_node; }
};

class Topology;

struct ClusterShapeOptions {
  int nodes = 1;           // identical nodes
  int ranks_per_node = 0;  // 0: one rank per GPU (1 when the topology has no GPU)
};

// The shape of a job on `options.nodes` copies of `topo`: intra = the slowest GPU-GPU path
// (ClassifyPath: NVLink / PCIe P2P bottleneck GB/s, SHM when P2P is not possible or there is no
// GPU), inter = the node's NICs with an active port (or an up link) summed (RDMA when any is
// IB/RoCE/EFA), DefaultLinkCost(kNetwork) when none is known. Each LinkCost says where it came from.
ClusterShape ClusterShapeFromTopology(const Topology& topo, const ClusterShapeOptions& options = {});

struct Prediction {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  double bytes = 0;
  double time_s = 0;
  double algbw_Bps = 0;
  double busbw_Bps = 0;
};

struct SizeRange {
  double min_bytes = 0;  // inclusive
  double max_bytes = 0;  // inclusive (the last size evaluated)
  CollectiveAlgorithm best = CollectiveAlgorithm::kRing;
};

class CostModel {
 public:
  // InvalidArgument when nodes/ranks are < 1 or a used link has non-positive bandwidth.
  static Result<CostModel> Create(ClusterShape shape);

  const ClusterShape& shape() const { return shape_; }
  // The algorithms with a formula above: ring, recursive_doubling, halving_doubling, hierarchical.
  static bool Models(CollectiveAlgorithm algorithm);
  // InvalidArgument for an algorithm the model has no formula for (Models() is false).
  Result<Prediction> Predict(CollectiveAlgorithm algorithm, double bytes) const;
  // The fastest algorithm for this size (hierarchical only considered with >1 node and >1 rank/node).
  Prediction Best(double bytes) const;
  // Predictions for sizes min..max, multiplying by `factor` (>1), for every applicable algorithm.
  std::vector<Prediction> Sweep(double min_bytes, double max_bytes, double factor = 2) const;
  // Consecutive size ranges with the same best algorithm, over the same sweep.
  std::vector<SizeRange> Choices(double min_bytes, double max_bytes, double factor = 2) const;
  std::vector<CollectiveAlgorithm> Applicable() const;

 private:
  explicit CostModel(ClusterShape shape) : shape_(std::move(shape)) {}
  ClusterShape shape_;
};

// ---- Host-only profile (CPU backends: Gloo/MPI over loopback and shared memory on this machine) ----
struct HostProfile {
  double memcpy_Bps = 0;           // single-thread memcpy bandwidth
  double loopback_alpha_s = 0;     // TCP 127.0.0.1 half round trip
  double loopback_beta_Bps = 0;    // TCP 127.0.0.1 streaming bandwidth
  int cpus = 0;
  std::vector<std::string> notes;  // what was measured vs. defaulted
};
struct HostProfileOptions {
  bool measure = true;              // false: documented defaults only (no timing)
  std::size_t memcpy_bytes = 32 << 20;
  std::size_t stream_bytes = 64 << 20;
  int pingpongs = 200;
  double time_limit_s = 5;          // every measurement is bounded by this
};
HostProfile ProbeHostProfile(const HostProfileOptions& options = {});
// A single-node shape for `ranks` CPU processes: loopback TCP for Gloo (tcp=true) or shared memory
// (MPI vader/sm: alpha 1 us, beta memcpy/2 since data is copied in and out).
ClusterShape HostShape(const HostProfile& profile, int ranks, bool tcp);

}  // namespace commkit::topology
