// Path classification between GPUs and NICs, with the meaning of `nvidia-smi topo -m` and NCCL:
//   X    the device itself
//   NV#  a bonded set of # NVLinks (direct, or through NVSwitches: min of both GPUs' NVSwitch links)
//   PIX  at most one PCIe switch between the two
//   PXB  several PCIe switches, no host bridge
//   PHB  through a PCIe host bridge (the CPU's root complex); NCCL's PHB
//   NODE between host bridges of one NUMA node (only when the model has explicit host bridges)
//   SYS  across the inter-socket link (QPI/UPI/xGMI); nvidia-smi's old "SOC"
// Explicit path overrides in the Topology (nvidia-smi matrices have no tree) take precedence.
//
// Feasibility follows NCCL defaults: P2P allowed up to PXB (NVLink included) unless an explicit P2P
// capability (nvidia-smi topo -p2p r, NVML, CUDA) says otherwise; GPUDirect RDMA between a GPU and a
// NIC up to PXB (NCCL_NET_GDR_LEVEL default) unless either side reports gdr=0.
//
// Pure functions over a const Topology; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/topology/model.h"

namespace commkit::topology {

// Ordered from closest to farthest (comparisons are meaningful: kPix < kPhb).
enum class PathType : std::uint8_t { kSelf, kNvLink, kPix, kPxb, kPhb, kNode, kSys, kUnknown };
// "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?" (NV without its count; see PathLabel).
std::string_view ToString(PathType type);

struct PathInfo {
  PathType type = PathType::kUnknown;
  int nvlinks = 0;               // bonded NVLink count when type == kNvLink
  double bandwidth_gbps = 0;     // bottleneck GB/s one direction; 0 when unknown
  bool p2p = false;              // GPU-GPU: CUDA P2P usable (see header comment)
  bool p2p_explicit = false;     // p2p came from an explicit capability, not the default rule
  bool gdr = false;              // GPU-NIC: GPUDirect RDMA feasible
  // "NV12", "PIX", "SYS", "X": the nvidia-smi spelling.
  std::string Label() const;
};

// Parses an nvidia-smi / NCCL path label: X, NV<n>, PIX, PXB, PHB, NODE, SYS, SOC (= SYS),
// NVL/NVB (NCCL; count 0), LOC (= X). Returns (type, nvlink count).
Result<std::pair<PathType, int>> ParsePathLabel(std::string_view label);

struct PathOptions {
  // Highest path type at which P2P is considered usable by default (NCCL_P2P_LEVEL analogue).
  PathType p2p_level = PathType::kPxb;
  // Highest path type at which GPUDirect RDMA is considered usable (NCCL_NET_GDR_LEVEL analogue).
  PathType gdr_level = PathType::kPxb;
  // Which explicit P2P mode decides p2p ('r' = read, NCCL/NVML's P2P_CAPS_INDEX_READ).
  char p2p_mode = 'r';
};

// The GPU x GPU x NIC matrix. Endpoints: GPUs ordered by index, then NICs in insertion order.
class PathMatrix {
 public:
  PathMatrix() = default;
  PathMatrix(std::vector<NodeId> endpoints, std::vector<std::string> labels);

  std::size_t size() const { return endpoints_.size(); }
  const std::vector<NodeId>& endpoints() const { return endpoints_; }
  const std::vector<std::string>& labels() const { return labels_; }  // "GPU0", "NIC0"/"mlx5_0"
  const PathInfo& at(std::size_t i, std::size_t j) const { return cells_[i * size() + j]; }
  PathInfo& at(std::size_t i, std::size_t j) { return cells_[i * size() + j]; }
  // Index of a node id among the endpoints.
  std::optional<std::size_t> IndexOf(NodeId id) const;

 private:
  std::vector<NodeId> endpoints_;
  std::vector<std::string> labels_;
  std::vector<PathInfo> cells_;
};

// Classifies one pair (GPU/NIC node ids). InvalidArgument when an id is not a GPU or NIC.
Result<PathInfo> ClassifyPath(const Topology& topo, NodeId a, NodeId b, const PathOptions& options = {});

// All pairs of GPUs and NICs. Never fails for a topology that passed Validate().
PathMatrix ComputePaths(const Topology& topo, const PathOptions& options = {});

}  // namespace commkit::topology
