// The topology model: what one GPU server looks like (CPU sockets/NUMA nodes, PCIe switches and
// bridges, GPUs, NVSwitches, NICs) and how its parts are linked (PCIe, NVLink, C2C, inter-socket,
// network).
//
// Plain structs in vectors, addressed by index (NodeId = index into Topology::nodes()). The tree
// (CPU -> host bridge/switch -> device) is expressed by Node::parent; other connections (NVLink,
// C2C, inter-socket SMP links) are Links. Importers (NCCL XML, hwloc XML, nvidia-smi text) and
// probers build a Topology; path classification (path.h) and exporters read it.
//
// Thread-safety: a Topology is a value; const methods may be called concurrently, mutation needs
// exclusive access. Node ids stay valid while nodes are only added (never removed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::topology {

using NodeId = std::int32_t;
inline constexpr NodeId kNoNode = -1;

enum class NodeKind : std::uint8_t {
  kCpu,          // a CPU socket / NUMA node (NCCL <cpu>, hwloc NUMANode/Package)
  kPciSwitch,    // a PCIe switch or bridge (NCCL <pci> with children, hwloc Bridge)
  kHostBridge,   // a PCIe host bridge / root complex attached to a CPU
  kGpu,
  kNvSwitch,
  kNic,
  kOtherPci,     // any other PCI device kept for completeness (NVMe, ...)
};
std::string_view ToString(NodeKind kind);

enum class NicKind : std::uint8_t { kUnknown, kInfiniBand, kRoCE, kEfa, kEthernet };
std::string_view ToString(NicKind kind);
// Accepts the ToString() spellings, case-insensitive ("infiniband", "roce", "efa", "ethernet").
Result<NicKind> ParseNicKind(std::string_view text);

enum class LinkKind : std::uint8_t {
  kPcie,      // parent/child PCIe link (also implied by Node::parent)
  kNvLink,    // GPU-GPU or GPU-NVSwitch NVLink bundle
  kC2C,       // chip-to-chip (Grace-Hopper NVLink-C2C)
  kSmp,       // inter-socket CPU link (QPI/UPI/xGMI/Infinity Fabric)
  kNetwork,   // NIC to fabric
};
std::string_view ToString(LinkKind kind);

enum class TopologySource : std::uint8_t { kUnknown, kProbed, kNcclXml, kHwlocXml, kNvsmi, kJson };
std::string_view ToString(TopologySource source);

// PCIe link description. Generation 0 / width 0 = unknown.
struct PcieLink {
  int gen = 0;            // 1..6, derived from the transfer rate
  int width = 0;          // lanes (x1..x32)
  int max_gen = 0;        // what the device/slot supports
  int max_width = 0;
  // Unidirectional bandwidth in GB/s for this gen/width (0 when unknown).
  double BandwidthGBps() const;
  bool Degraded() const { return (max_gen > 0 && gen > 0 && gen < max_gen) ||
                                 (max_width > 0 && width > 0 && width < max_width); }
};
// GT/s per PCIe generation (2.5, 5, 8, 16, 32, 64); 0 for unknown.
double PcieGenTransferRate(int gen);
// Maps "8.0 GT/s PCIe", "16 GT/s", "32.0 GT/s" or "2.5" to a generation; 0 when unknown.
int PcieGenFromSpeedString(std::string_view speed);
// Per-lane unidirectional GB/s of a generation (after encoding overhead).
double PcieLaneGBps(int gen);

struct CpuInfo {
  int numa_id = -1;                 // -1 unknown
  std::string affinity_mask;        // NCCL style hex mask, e.g. "ffffffff,00000000" (may be empty)
  std::string affinity_list;        // "0-23,48-71" (may be empty)
  std::string arch;                 // x86_64, arm64, ppc64
  std::string vendor;               // GenuineIntel, AuthenticAMD, ...
  std::string family_id;            // NCCL familyid (decimal string as NCCL writes it)
  std::string model_id;             // NCCL modelid
};

struct PciInfo {
  std::string bus_id;               // canonical "0000:07:00.0" (lower case, 4-digit domain)
  std::string class_code;           // "0x060400"
  std::string vendor_id;            // "0x10de"
  std::string device_id;
  std::string subsystem_vendor_id;
  std::string subsystem_device_id;
  PcieLink link;                    // link to the parent
};

struct GpuInfo {
  int index = -1;                   // logical index (NCCL dev / nvidia-smi GPU#)
  int cuda_index = -1;              // -1 unknown
  int nvml_index = -1;
  int rank = -1;                    // NCCL rank in a dump, -1 otherwise
  std::string name;                 // "NVIDIA A100-SXM4-40GB"
  std::string uuid;
  int sm = 0;                       // compute capability * 10 (80 = 8.0); 0 unknown
  std::uint64_t memory_bytes = 0;
  std::optional<bool> gdr;          // NCCL <gpu gdr=>
};

struct NicPort {
  int port = 1;
  std::string state;                // "ACTIVE", "DOWN" (as read)
  std::string phys_state;           // "LinkUp"
  std::string link_layer;           // "InfiniBand", "Ethernet"
  double speed_gbps = 0;            // line rate in Gb/s
  std::string guid;
  int mtu = 0;
  std::vector<std::string> gids;    // only populated ones
};

struct NicInfo {
  NicKind kind = NicKind::kUnknown;
  std::string name;                 // mlx5_0, rdmap16s27, eth0, or NCCL <net name>
  int dev = -1;                     // NCCL net dev index
  std::vector<NicPort> ports;
  std::vector<std::string> netdevs; // eth0, ib0, ...
  std::optional<bool> gdr;          // GPUDirect RDMA support if known
  int max_conn = 0;                 // NCCL maxconn
  std::string guid;                 // NCCL net guid
  // Total line rate over ports in Gb/s (0 when unknown).
  double SpeedGbps() const;
};

struct Node {
  NodeId id = kNoNode;
  NodeKind kind = NodeKind::kOtherPci;
  NodeId parent = kNoNode;          // PCIe parent (switch/host bridge) or owning CPU; kNoNode at roots
  std::string label;                // human label ("GPU0", "mlx5_0", "CPU0", "PCI 0000:05:00.0")
  CpuInfo cpu;                      // kCpu only
  PciInfo pci;                      // PCI devices (switches, GPUs, NICs, NVSwitches)
  GpuInfo gpu;                      // kGpu only
  NicInfo nic;                      // kNic only
};

struct Link {
  LinkKind kind = LinkKind::kPcie;
  NodeId a = kNoNode;
  NodeId b = kNoNode;
  int count = 1;                    // NVLink: number of bonded links
  int nvlink_version = 0;           // 1..5, 0 unknown (derived from GPU sm when not given)
  double bandwidth_gbps = 0;        // GB/s per direction for the whole bundle; 0 = derive
  std::string target_class;         // NCCL nvlink tclass ("0x068000" = NVSwitch)
};

// Per-GPU-NVLink bandwidth (GB/s, one direction, one link) for an NVLink version.
double NvLinkPerLinkGBps(int version);
// NVLink version from compute capability * 10 (60->1, 70->2, 80->3, 90->4, 100->5).
int NvLinkVersionForSm(int sm);

// An explicitly known pairwise path type (from nvidia-smi topo -m, which has no tree) or a P2P
// capability (nvidia-smi topo -p2p, NVML, cudaDeviceCanAccessPeer). Endpoints are node ids of
// GPUs or NICs. Path classification prefers these over the tree.
struct PathOverride {
  NodeId a = kNoNode;
  NodeId b = kNoNode;
  std::string type;                 // "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "X"
};
struct P2pOverride {
  NodeId a = kNoNode;
  NodeId b = kNoNode;
  char mode = 'r';                  // 'r' read, 'w' write, 'n' nvlink, 'a' atomics, 'p' prop
  std::string status;               // "OK", "CNS", "GNS", "TNS", "NS", "DR", "U"
};

// Extra per-GPU affinity columns from nvidia-smi topo -m (kept verbatim for faithful re-export).
struct GpuAffinity {
  NodeId gpu = kNoNode;
  std::string cpu_affinity;         // "0-23,48-71"
  std::string numa_affinity;        // "0" or "N/A"
  std::string gpu_numa_id;          // "N/A"
};

struct TopologyMetadata {
  TopologySource source = TopologySource::kUnknown;
  std::string source_path;          // the file imported, if any
  std::string hostname;
  std::string format_version;       // NCCL xml version, hwloc version, ...
  std::vector<std::string> notes;   // importer remarks (dropped elements, guesses)
};

class Topology {
 public:
  // --- building -----------------------------------------------------------------------------
  // Adds a node; assigns and returns its id (node.id is overwritten).
  NodeId AddNode(Node node);
  // Adds a link between two existing nodes (COMMKIT_CHECK on bad ids: programmer error).
  void AddLink(Link link);
  void AddPathOverride(PathOverride o) { path_overrides_.push_back(std::move(o)); }
  void AddP2pOverride(P2pOverride o) { p2p_overrides_.push_back(std::move(o)); }
  void AddGpuAffinity(GpuAffinity a) { affinities_.push_back(std::move(a)); }
  Node& node(NodeId id);
  TopologyMetadata& metadata() { return metadata_; }

  // --- reading ------------------------------------------------------------------------------
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(NodeId id) const;
  bool Contains(NodeId id) const { return id >= 0 && static_cast<std::size_t>(id) < nodes_.size(); }
  const TopologyMetadata& metadata() const { return metadata_; }
  const std::vector<PathOverride>& path_overrides() const { return path_overrides_; }
  const std::vector<P2pOverride>& p2p_overrides() const { return p2p_overrides_; }
  const std::vector<GpuAffinity>& gpu_affinities() const { return affinities_; }

  // Ids of nodes of a kind, in insertion order. Gpus() is ordered by GpuInfo::index when set.
  std::vector<NodeId> NodesOfKind(NodeKind kind) const;
  std::vector<NodeId> Gpus() const;
  std::vector<NodeId> Nics() const;
  std::vector<NodeId> Cpus() const { return NodesOfKind(NodeKind::kCpu); }
  std::size_t GpuCount() const { return Gpus().size(); }
  std::size_t NicCount() const { return Nics().size(); }

  // Lookups; std::nullopt when absent. Bus ids are compared canonically (see CanonicalBusId).
  std::optional<NodeId> FindByBusId(std::string_view bus_id) const;
  std::optional<NodeId> FindGpu(int index) const;
  std::optional<NodeId> FindNic(std::string_view name) const;
  std::optional<NodeId> FindCpuByNuma(int numa_id) const;

  // Children of a node (nodes whose parent is id), in insertion order.
  std::vector<NodeId> Children(NodeId id) const;
  // Chain from a node up to its root: [id, parent, grandparent, ...].
  std::vector<NodeId> Ancestors(NodeId id) const;
  // The CPU node above a node, or kNoNode.
  NodeId CpuOf(NodeId id) const;
  // Links touching a node (indices into links()).
  std::vector<std::size_t> LinksOf(NodeId id) const;
  // Sum of NVLink counts between two nodes (direct links only).
  int DirectNvLinkCount(NodeId a, NodeId b) const;

  // Structural checks: ids in range, no parent cycles, links between existing distinct nodes,
  // GPU indices unique, bus ids unique, overrides reference GPUs/NICs. Returns the first problem
  // as InvalidArgument naming the node.
  Status Validate() const;

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<PathOverride> path_overrides_;
  std::vector<P2pOverride> p2p_overrides_;
  std::vector<GpuAffinity> affinities_;
  TopologyMetadata metadata_;
};

// "0000:07:00.0" from "07:00.0", "00000000:07:00.0" (nvidia-smi 8-digit domain), upper case, etc.
// Returns the input lower-cased when it does not look like a bus id.
std::string CanonicalBusId(std::string_view bus_id);

}  // namespace commkit::topology
