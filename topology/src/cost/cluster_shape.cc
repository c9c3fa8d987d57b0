// ClusterShape from a probed or imported Topology.
#include <algorithm>

#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"
#include "commkit/topology/model.h"
#include "commkit/topology/path.h"

namespace commkit::topology {

ClusterShape ClusterShapeFromTopology(const Topology& topo, const ClusterShapeOptions& options) {
  ClusterShape s;
  s.nodes = std::max(1, options.nodes);
  const std::vector<NodeId> gpus = topo.Gpus();
  s.ranks_per_node = options.ranks_per_node > 0 ? options.ranks_per_node : std::max<int>(1, static_cast<int>(gpus.size()));

  // Intra-node: the worst GPU pair bounds a ring.
  s.intra = DefaultLinkCost(LinkClass::kSHM);
  s.intra.derivation = gpus.size() < 2 ? "no GPU pair: host shared memory (default)" : s.intra.derivation;
  bool have_pair = false;
  double worst = 0;
  LinkClass worst_class = LinkClass::kSHM;
  std::string worst_desc;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (std::size_t j = i + 1; j < gpus.size(); ++j) {
      auto p = ClassifyPath(topo, gpus[i], gpus[j]);
      if (!p.ok()) continue;
      LinkClass c = p->type == PathType::kNvLink ? LinkClass::kNVLink : p->p2p ? LinkClass::kPCIe : LinkClass::kSHM;
      double gbps = c == LinkClass::kSHM ? DefaultLinkCost(LinkClass::kSHM).beta_Bps / 1e9 : p->bandwidth_gbps;
      if (gbps <= 0) gbps = DefaultLinkCost(c).beta_Bps / 1e9;
      if (!have_pair || gbps < worst) {
        have_pair = true;
        worst = gbps;
        worst_class = c;
        worst_desc = StrCat(topo.node(gpus[i]).label, "-", topo.node(gpus[j]).label, " ", p->Label());
      }
    }
  }
  if (have_pair) {
    s.intra = DefaultLinkCost(worst_class);
    s.intra.beta_Bps = worst * 1e9;
    s.intra.derivation = StrCat("slowest GPU pair ", worst_desc, ": ", ToString(worst_class), " ", worst, " GB/s");
  }

  // Inter-node: every usable NIC's line rate.
  double mbps = 0;
  bool rdma = false;
  std::vector<std::string> used;
  for (NodeId id : topo.Nics()) {
    const NicInfo& nic = topo.node(id).nic;
    bool active = nic.ports.empty();
    for (const auto& p : nic.ports) active = active || p.state.empty() || p.state == "ACTIVE";
    const double gbps = nic.SpeedGbps();
    if (!active || gbps <= 0) continue;
    mbps += gbps * 1000;
    rdma = rdma || nic.kind == NicKind::kInfiniBand || nic.kind == NicKind::kRoCE || nic.kind == NicKind::kEfa;
    used.push_back(StrCat(nic.name.empty() ? topo.node(id).label : nic.name, " ", gbps, " Gb/s"));
  }
  if (mbps > 0) {
    s.inter = NetworkLinkCost(mbps, rdma);
    s.inter.derivation = StrCat(used.size(), " NIC(s) (", Join(used, ", "), "), ", rdma ? "RDMA" : "TCP sockets", ": ",
                                s.inter.derivation);
  } else {
    s.inter = DefaultLinkCost(LinkClass::kNetwork);
    s.inter.derivation = StrCat("no NIC speed known: ", s.inter.derivation);
  }
  return s;
}

}  // namespace commkit::topology
