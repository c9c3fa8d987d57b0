// Topology model: enum names, PCIe/NVLink bandwidth tables, lookups and validation.
#include "commkit/topology/model.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "commkit/common/check.h"
#include "commkit/common/strings.h"

namespace commkit::topology {

std::string_view ToString(NodeKind kind) {
  switch (kind) {
    case NodeKind::kCpu: return "cpu";
    case NodeKind::kPciSwitch: return "pci_switch";
    case NodeKind::kHostBridge: return "host_bridge";
    case NodeKind::kGpu: return "gpu";
    case NodeKind::kNvSwitch: return "nvswitch";
    case NodeKind::kNic: return "nic";
    case NodeKind::kOtherPci: return "pci";
  }
  return "unknown";
}

std::string_view ToString(NicKind kind) {
  switch (kind) {
    case NicKind::kUnknown: return "unknown";
    case NicKind::kInfiniBand: return "infiniband";
    case NicKind::kRoCE: return "roce";
    case NicKind::kEfa: return "efa";
    case NicKind::kEthernet: return "ethernet";
  }
  return "unknown";
}

Result<NicKind> ParseNicKind(std::string_view text) {
  const std::string t = ToLower(Trim(text));
  for (NicKind k : {NicKind::kUnknown, NicKind::kInfiniBand, NicKind::kRoCE, NicKind::kEfa,
                    NicKind::kEthernet}) {
    if (t == ToString(k)) return k;
  }
  if (t == "ib") return NicKind::kInfiniBand;
  if (t == "eth") return NicKind::kEthernet;
  return Status::InvalidArgument(StrCat("unknown NIC kind '", text,
                                        "': use infiniband, roce, efa, ethernet or unknown"));
}

std::string_view ToString(LinkKind kind) {
  switch (kind) {
    case LinkKind::kPcie: return "pcie";
    case LinkKind::kNvLink: return "nvlink";
    case LinkKind::kC2C: return "c2c";
    case LinkKind::kSmp: return "smp";
    case LinkKind::kNetwork: return "network";
  }
  return "unknown";
}

std::string_view ToString(TopologySource source) {
  switch (source) {
    case TopologySource::kUnknown: return "unknown";
    case TopologySource::kProbed: return "probed";
    case TopologySource::kNcclXml: return "nccl-xml";
    case TopologySource::kHwlocXml: return "hwloc-xml";
    case TopologySource::kNvsmi: return "nvsmi";
    case TopologySource::kJson: return "json";
  }
  return "unknown";
}

double PcieGenTransferRate(int gen) {
  switch (gen) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 3: return 8.0;
    case 4: return 16.0;
    case 5: return 32.0;
    case 6: return 64.0;
    default: return 0.0;
  }
}

double PcieLaneGBps(int gen) {
  // Gen1/2 use 8b/10b, Gen3-5 128b/130b, Gen6 PAM4+FLIT (~242/256).
  const double gt = PcieGenTransferRate(gen);
  if (gen <= 0 || gt == 0) return 0.0;
  if (gen <= 2) return gt * 0.8 / 8.0;
  if (gen <= 5) return gt * (128.0 / 130.0) / 8.0;
  return gt * (242.0 / 256.0) / 8.0;
}

int PcieGenFromSpeedString(std::string_view speed) {
  std::string_view s = Trim(speed);
  std::size_t end = 0;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
  auto value = ParseDouble(s.substr(0, end));
  if (!value) return 0;
  const double v = *value;
  for (int gen = 1; gen <= 6; ++gen) {
    const double r = PcieGenTransferRate(gen);
    if (v > r * 0.95 && v < r * 1.05) return gen;
  }
  return 0;
}

double PcieLink::BandwidthGBps() const { return width > 0 ? PcieLaneGBps(gen) * width : 0.0; }

double NvLinkPerLinkGBps(int version) {
  switch (version) {
    case 1: return 20.0;   // P100
    case 2: return 25.0;   // V100
    case 3: return 25.0;   // A100 (12 links, 300 GB/s per direction)
    case 4: return 25.0;   // H100 (18 links, 450 GB/s per direction)
    case 5: return 50.0;   // B200 (18 links, 900 GB/s per direction)
    default: return 0.0;
  }
}

int NvLinkVersionForSm(int sm) {
  if (sm >= 100) return 5;
  if (sm >= 90) return 4;
  if (sm >= 80) return 3;
  if (sm >= 70) return 2;
  if (sm >= 60) return 1;
  return 0;
}

double NicInfo::SpeedGbps() const {
  double total = 0;
  for (const auto& p : ports) total += p.speed_gbps;
  return total;
}

std::string CanonicalBusId(std::string_view bus_id) {
  std::string s = ToLower(Trim(bus_id));
  // domain:bus:dev.fn, domain optional, domain may be 8 hex digits (nvidia-smi).
  auto parts = Split(s, ':');
  auto is_hex = [](std::string_view v) {
    return !v.empty() && std::all_of(v.begin(), v.end(),
                                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  };
  std::string domain = "0000", bus, devfn;
  if (parts.size() == 3) {
    domain = parts[0];
    bus = parts[1];
    devfn = parts[2];
  } else if (parts.size() == 2) {
    bus = parts[0];
    devfn = parts[1];
  } else {
    return s;
  }
  auto dot = devfn.find('.');
  if (dot == std::string::npos) return s;
  std::string dev = devfn.substr(0, dot), fn = devfn.substr(dot + 1);
  if (!is_hex(domain) || !is_hex(bus) || !is_hex(dev) || !is_hex(fn) || domain.size() > 8 ||
      bus.size() > 2 || dev.size() > 2 || fn.size() != 1) {
    return s;
  }
  if (domain.size() > 4) {
    // 00000000 -> 0000; keep a genuinely wide domain (e.g. VMD 10000) without its leading zeros.
    std::size_t nz = domain.find_first_not_of('0');
    domain = nz == std::string::npos ? "0" : domain.substr(nz);
  }
  while (domain.size() < 4) domain.insert(0, "0");
  if (bus.size() < 2) bus.insert(0, "0");
  if (dev.size() < 2) dev.insert(0, "0");
  return StrCat(domain, ":", bus, ":", dev, ".", fn);
}

NodeId Topology::AddNode(Node node) {
  node.id = static_cast<NodeId>(nodes_.size());
  if (!node.pci.bus_id.empty()) node.pci.bus_id = CanonicalBusId(node.pci.bus_id);
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

void Topology::AddLink(Link link) {
  COMMKIT_CHECK(Contains(link.a) && Contains(link.b), "Topology::AddLink: node id out of range");
  links_.push_back(std::move(link));
}

Node& Topology::node(NodeId id) {
  COMMKIT_CHECK(Contains(id), "Topology::node: id ", id, " out of range");
  return nodes_[static_cast<std::size_t>(id)];
}

const Node& Topology::node(NodeId id) const {
  COMMKIT_CHECK(Contains(id), "Topology::node: id ", id, " out of range");
  return nodes_[static_cast<std::size_t>(id)];
}

std::vector<NodeId> Topology::NodesOfKind(NodeKind kind) const {
  std::vector<NodeId> out;
  for (const auto& n : nodes_) {
    if (n.kind == kind) out.push_back(n.id);
  }
  return out;
}

std::vector<NodeId> Topology::Gpus() const {
  std::vector<NodeId> out = NodesOfKind(NodeKind::kGpu);
  std::stable_sort(out.begin(), out.end(), [this](NodeId a, NodeId b) {
    const int ia = node(a).gpu.index, ib = node(b).gpu.index;
    if (ia < 0 || ib < 0) return ia >= 0 && ib < 0;  // indexed GPUs first
    return ia < ib;
  });
  return out;
}

std::vector<NodeId> Topology::Nics() const { return NodesOfKind(NodeKind::kNic); }

std::optional<NodeId> Topology::FindByBusId(std::string_view bus_id) const {
  const std::string want = CanonicalBusId(bus_id);
  for (const auto& n : nodes_) {
    if (!n.pci.bus_id.empty() && n.pci.bus_id == want) return n.id;
  }
  return std::nullopt;
}

std::optional<NodeId> Topology::FindGpu(int index) const {
  for (const auto& n : nodes_) {
    if (n.kind == NodeKind::kGpu && n.gpu.index == index) return n.id;
  }
  return std::nullopt;
}

std::optional<NodeId> Topology::FindNic(std::string_view name) const {
  for (const auto& n : nodes_) {
    if (n.kind != NodeKind::kNic) continue;
    if (n.nic.name == name || n.label == name) return n.id;
    for (const auto& d : n.nic.netdevs) {
      if (d == name) return n.id;
    }
  }
  return std::nullopt;
}

std::optional<NodeId> Topology::FindCpuByNuma(int numa_id) const {
  for (const auto& n : nodes_) {
    if (n.kind == NodeKind::kCpu && n.cpu.numa_id == numa_id) return n.id;
  }
  return std::nullopt;
}

std::vector<NodeId> Topology::Children(NodeId id) const {
  std::vector<NodeId> out;
  for (const auto& n : nodes_) {
    if (n.parent == id && id != kNoNode) out.push_back(n.id);
  }
  return out;
}

std::vector<NodeId> Topology::Ancestors(NodeId id) const {
  std::vector<NodeId> out;
  // Bounded by the node count so a (invalid) cycle cannot loop forever.
  while (Contains(id) && out.size() <= nodes_.size()) {
    out.push_back(id);
    id = nodes_[static_cast<std::size_t>(id)].parent;
  }
  return out;
}

NodeId Topology::CpuOf(NodeId id) const {
  for (NodeId a : Ancestors(id)) {
    if (node(a).kind == NodeKind::kCpu) return a;
  }
  return kNoNode;
}

std::vector<std::size_t> Topology::LinksOf(NodeId id) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i].a == id || links_[i].b == id) out.push_back(i);
  }
  return out;
}

int Topology::DirectNvLinkCount(NodeId a, NodeId b) const {
  int total = 0;
  for (const auto& l : links_) {
    if (l.kind == LinkKind::kNvLink && ((l.a == a && l.b == b) || (l.a == b && l.b == a))) {
      total += l.count;
    }
  }
  return total;
}

Status Topology::Validate() const {
  const auto name = [this](NodeId id) {
    const Node& n = nodes_[static_cast<std::size_t>(id)];
    return StrCat(ToString(n.kind), " node ", id, n.label.empty() ? "" : StrCat(" (", n.label, ")"));
  };
  std::set<int> gpu_indices;
  std::set<std::string> bus_ids;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.id != static_cast<NodeId>(i)) {
      return Status::InvalidArgument(StrCat("topology: node at position ", i, " has id ", n.id));
    }
    if (n.parent != kNoNode && !Contains(n.parent)) {
      return Status::InvalidArgument(StrCat("topology: ", name(n.id), " has unknown parent ", n.parent));
    }
    if (Ancestors(n.id).size() > nodes_.size()) {
      return Status::InvalidArgument(StrCat("topology: ", name(n.id), " is part of a parent cycle"));
    }
    if (n.kind == NodeKind::kGpu && n.gpu.index >= 0 && !gpu_indices.insert(n.gpu.index).second) {
      return Status::InvalidArgument(
          StrCat("topology: ", name(n.id), " repeats GPU index ", n.gpu.index));
    }
    if (!n.pci.bus_id.empty() && !bus_ids.insert(n.pci.bus_id).second) {
      return Status::InvalidArgument(
          StrCat("topology: ", name(n.id), " repeats PCI bus id ", n.pci.bus_id));
    }
  }
  for (std::size_t i = 0; i < links_.size(); ++i) {
    const Link& l = links_[i];
    if (!Contains(l.a) || !Contains(l.b)) {
      return Status::InvalidArgument(StrCat("topology: link ", i, " references a missing node"));
    }
    if (l.a == l.b) {
      return Status::InvalidArgument(StrCat("topology: link ", i, " connects ", name(l.a), " to itself"));
    }
    if (l.count <= 0) {
      return Status::InvalidArgument(StrCat("topology: link ", i, " has count ", l.count));
    }
  }
  const auto endpoint_ok = [this](NodeId id) {
    return Contains(id) && (node(id).kind == NodeKind::kGpu || node(id).kind == NodeKind::kNic);
  };
  for (const auto& o : path_overrides_) {
    if (!endpoint_ok(o.a) || !endpoint_ok(o.b)) {
      return Status::InvalidArgument(StrCat("topology: path override ", o.a, "-", o.b, " (", o.type,
                                            ") does not join two GPUs/NICs"));
    }
  }
  for (const auto& o : p2p_overrides_) {
    if (!endpoint_ok(o.a) || !endpoint_ok(o.b)) {
      return Status::InvalidArgument(
          StrCat("topology: P2P override ", o.a, "-", o.b, " does not join two GPUs"));
    }
  }
  for (const auto& a : affinities_) {
    if (!Contains(a.gpu) || node(a.gpu).kind != NodeKind::kGpu) {
      return Status::InvalidArgument(StrCat("topology: affinity entry for non-GPU node ", a.gpu));
    }
  }
  return Status::Ok();
}

}  // namespace commkit::topology
