// Path classification (see path.h): overrides first, then NVLink (direct or via NVSwitch), then the
// PCIe tree (lowest common ancestor), then CPU sockets.
#include "commkit/topology/path.h"

#include <algorithm>
#include <limits>

#include "commkit/common/strings.h"

namespace commkit::topology {
namespace {

bool IsEndpoint(const Topology& t, NodeId id) {
  return t.Contains(id) && (t.node(id).kind == NodeKind::kGpu || t.node(id).kind == NodeKind::kNic);
}

double NvLinkBundleGBps(const Topology& t, const Link& l) {
  if (l.bandwidth_gbps > 0) return l.bandwidth_gbps;
  int version = l.nvlink_version;
  if (version == 0) {
    for (NodeId id : {l.a, l.b}) {
      if (t.node(id).kind == NodeKind::kGpu) version = std::max(version, NvLinkVersionForSm(t.node(id).gpu.sm));
    }
  }
  return NvLinkPerLinkGBps(version) * l.count;
}

struct NvSide {
  int count = 0;
  double gbps = 0;
};

// NVLinks from a GPU into NVSwitches (any NVSwitch node, or a link whose target class is 0x068000).
NvSide NvSwitchSide(const Topology& t, NodeId gpu) {
  NvSide side;
  for (const Link& l : t.links()) {
    if (l.kind != LinkKind::kNvLink || (l.a != gpu && l.b != gpu)) continue;
    const NodeId other = l.a == gpu ? l.b : l.a;
    if (t.node(other).kind == NodeKind::kNvSwitch) {
      side.count += l.count;
      side.gbps += NvLinkBundleGBps(t, l);
    }
  }
  return side;
}

std::string EndpointLabel(const Node& n, std::size_t nic_ordinal) {
  if (n.kind == NodeKind::kGpu) return StrCat("GPU", n.gpu.index >= 0 ? n.gpu.index : n.id);
  if (!n.nic.name.empty()) return n.nic.name;
  return StrCat("NIC", nic_ordinal);
}

double PcieBottleneck(const Topology& t, const std::vector<NodeId>& up_a, const std::vector<NodeId>& up_b,
                      NodeId lca) {
  double bw = std::numeric_limits<double>::infinity();
  bool any = false;
  for (const auto* chain : {&up_a, &up_b}) {
    for (NodeId id : *chain) {
      if (id == lca) break;
      const double b = t.node(id).pci.link.BandwidthGBps();
      if (b > 0) {
        bw = std::min(bw, b);
        any = true;
      }
    }
  }
  return any ? bw : 0.0;
}

double SmpBandwidth(const Topology& t, NodeId cpu_a, NodeId cpu_b) {
  for (const Link& l : t.links()) {
    if (l.kind == LinkKind::kSmp && ((l.a == cpu_a && l.b == cpu_b) || (l.a == cpu_b && l.b == cpu_a))) {
      return l.bandwidth_gbps;
    }
  }
  return 0.0;
}

double MinPositive(double a, double b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

}  // namespace

std::string_view ToString(PathType type) {
  switch (type) {
    case PathType::kSelf: return "X";
    case PathType::kNvLink: return "NV";
    case PathType::kPix: return "PIX";
    case PathType::kPxb: return "PXB";
    case PathType::kPhb: return "PHB";
    case PathType::kNode: return "NODE";
    case PathType::kSys: return "SYS";
    case PathType::kUnknown: return "?";
  }
  return "?";
}

std::string PathInfo::Label() const {
  if (type == PathType::kNvLink) return StrCat("NV", nvlinks);
  return std::string(ToString(type));
}

Result<std::pair<PathType, int>> ParsePathLabel(std::string_view label) {
  const std::string s(Trim(label));
  if (s == "X" || s == "LOC") return std::pair{PathType::kSelf, 0};
  if (s == "PIX") return std::pair{PathType::kPix, 0};
  if (s == "PXB") return std::pair{PathType::kPxb, 0};
  if (s == "PHB") return std::pair{PathType::kPhb, 0};
  if (s == "NODE") return std::pair{PathType::kNode, 0};
  if (s == "SYS" || s == "SOC") return std::pair{PathType::kSys, 0};
  if (s == "NVL" || s == "NVB") return std::pair{PathType::kNvLink, 0};
  if (s.size() > 2 && s.compare(0, 2, "NV") == 0) {
    auto n = ParseInt(std::string_view(s).substr(2));
    if (n && *n > 0 && *n <= 1024) return std::pair{PathType::kNvLink, static_cast<int>(*n)};
  }
  return Status::InvalidArgument(StrCat("unknown path label '", s,
                                        "' (expected X, NV<n>, PIX, PXB, PHB, NODE, SYS or SOC)"));
}

PathMatrix::PathMatrix(std::vector<NodeId> endpoints, std::vector<std::string> labels)
    : endpoints_(std::move(endpoints)), labels_(std::move(labels)), cells_(endpoints_.size() * endpoints_.size()) {}

std::optional<std::size_t> PathMatrix::IndexOf(NodeId id) const {
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i] == id) return i;
  }
  return std::nullopt;
}

Result<PathInfo> ClassifyPath(const Topology& t, NodeId a, NodeId b, const PathOptions& options) {
  if (!IsEndpoint(t, a) || !IsEndpoint(t, b)) {
    return Status::InvalidArgument(StrCat("ClassifyPath: nodes ", a, " and ", b, " must both be GPUs or NICs"));
  }
  const Node& na = t.node(a);
  const Node& nb = t.node(b);
  const bool both_gpus = na.kind == NodeKind::kGpu && nb.kind == NodeKind::kGpu;
  PathInfo info;

  if (a == b) {
    info.type = PathType::kSelf;
    info.p2p = both_gpus;
    return info;
  }

  // 1. Explicit override (nvidia-smi matrix).
  bool overridden = false;
  for (const auto& o : t.path_overrides()) {
    if ((o.a == a && o.b == b) || (o.a == b && o.b == a)) {
      auto parsed = ParsePathLabel(o.type);
      if (!parsed.ok()) return parsed.status().WithContext(StrCat("path override ", a, "-", b));
      info.type = parsed->first;
      info.nvlinks = parsed->second;
      overridden = true;
      break;
    }
  }

  // 2. NVLink between two GPUs.
  double nv_bw = 0;
  if (both_gpus) {
    int direct = 0;
    double direct_bw = 0;
    for (const Link& l : t.links()) {
      if (l.kind == LinkKind::kNvLink && ((l.a == a && l.b == b) || (l.a == b && l.b == a))) {
        direct += l.count;
        direct_bw += NvLinkBundleGBps(t, l);
      }
    }
    const NvSide sa = NvSwitchSide(t, a), sb = NvSwitchSide(t, b);
    int via_switch = std::min(sa.count, sb.count);
    double switch_bw = std::min(sa.gbps, sb.gbps);
    if (!overridden && (direct > 0 || via_switch > 0)) {
      info.type = PathType::kNvLink;
      info.nvlinks = direct + via_switch;
    }
    nv_bw = direct_bw + (via_switch > 0 ? switch_bw : 0);
    if (info.type == PathType::kNvLink && nv_bw <= 0) {
      const int version = std::max(NvLinkVersionForSm(na.gpu.sm), NvLinkVersionForSm(nb.gpu.sm));
      nv_bw = NvLinkPerLinkGBps(version) * info.nvlinks;
    }
  }

  // 3. PCIe tree.
  const std::vector<NodeId> up_a = t.Ancestors(a), up_b = t.Ancestors(b);
  NodeId lca = kNoNode;
  for (NodeId x : up_a) {
    if (std::find(up_b.begin(), up_b.end(), x) != up_b.end()) {
      lca = x;
      break;
    }
  }
  PathType tree_type = PathType::kSys;
  double tree_bw = 0;
  if (lca != kNoNode) {
    const NodeKind k = t.node(lca).kind;
    if (k == NodeKind::kPciSwitch || k == NodeKind::kOtherPci || k == NodeKind::kGpu || k == NodeKind::kNic) {
      int switches = 0;
      for (const auto* chain : {&up_a, &up_b}) {
        for (std::size_t i = 1; i < chain->size() && (*chain)[i] != lca; ++i) {
          if (t.node((*chain)[i]).kind == NodeKind::kPciSwitch) ++switches;
        }
      }
      tree_type = switches == 0 ? PathType::kPix : PathType::kPxb;
    } else if (k == NodeKind::kHostBridge) {
      tree_type = PathType::kPhb;
    } else if (k == NodeKind::kCpu) {
      // Different host bridges under one CPU = NODE; without explicit host bridges NCCL says PHB.
      auto bridge_below = [&](const std::vector<NodeId>& chain) {
        for (NodeId x : chain) {
          if (x == lca) break;
          if (t.node(x).kind == NodeKind::kHostBridge) return x;
        }
        return kNoNode;
      };
      const NodeId ha = bridge_below(up_a), hb = bridge_below(up_b);
      tree_type = (ha != kNoNode && hb != kNoNode && ha != hb) ? PathType::kNode : PathType::kPhb;
    } else {
      tree_type = PathType::kPxb;
    }
    tree_bw = PcieBottleneck(t, up_a, up_b, lca);
  } else {
    const NodeId ca = t.CpuOf(a), cb = t.CpuOf(b);
    tree_bw = MinPositive(PcieBottleneck(t, up_a, up_b, kNoNode),
                          ca != kNoNode && cb != kNoNode ? SmpBandwidth(t, ca, cb) : 0.0);
    if (ca == kNoNode || cb == kNoNode) tree_type = PathType::kSys;
  }
  if (!overridden && info.type != PathType::kNvLink) info.type = tree_type;
  info.bandwidth_gbps = info.type == PathType::kNvLink ? nv_bw : tree_bw;

  // 4. Feasibility.
  if (both_gpus) {
    info.p2p = info.type <= options.p2p_level;
    for (const auto& o : t.p2p_overrides()) {
      if (o.mode == options.p2p_mode && ((o.a == a && o.b == b) || (o.a == b && o.b == a))) {
        info.p2p = o.status == "OK";
        info.p2p_explicit = true;
        break;
      }
    }
  } else if (na.kind != nb.kind) {
    const Node& gpu = na.kind == NodeKind::kGpu ? na : nb;
    const Node& nic = na.kind == NodeKind::kNic ? na : nb;
    info.gdr = info.type <= options.gdr_level && gpu.gpu.gdr.value_or(true) && nic.nic.gdr.value_or(true);
  }
  return info;
}

PathMatrix ComputePaths(const Topology& t, const PathOptions& options) {
  std::vector<NodeId> ends = t.Gpus();
  std::vector<std::string> labels;
  for (NodeId g : ends) labels.push_back(EndpointLabel(t.node(g), 0));
  std::size_t nic_ordinal = 0;
  for (NodeId n : t.Nics()) {
    ends.push_back(n);
    labels.push_back(EndpointLabel(t.node(n), nic_ordinal++));
  }
  PathMatrix m(ends, labels);
  for (std::size_t i = 0; i < ends.size(); ++i) {
    for (std::size_t j = 0; j < ends.size(); ++j) {
      auto r = ClassifyPath(t, ends[i], ends[j], options);
      if (r.ok()) m.at(i, j) = *r;
    }
  }
  return m;
}

}  // namespace commkit::topology
