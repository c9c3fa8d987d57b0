// Topology-based node checks: PCIe links running below capability, ACS redirect on bridges above
// GPUs (blocks P2P), RDMA port state / RoCE GID type. They read the context's shared probe
// (CheckContext::topology: ProbeTopology through the context's SystemView, once per run), so
// captured trees replay.
#include <map>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/probe.h"

namespace commkit::diagnostics {
namespace {

using namespace commkit::topology;

CheckOutcome Make(CheckStatus s, std::string summary, std::vector<std::string> evidence = {}, std::string fix = "") {
  return CheckOutcome{s, std::move(summary), std::move(evidence), std::move(fix)};
}

// The run's shared probe (CheckContext::topology): every topology check reads the same report.
const Result<ProbeReport>& Probe(const CheckContext& ctx) { return ctx.topology(); }

std::string Describe(const Topology& t, NodeId id) {
  const Node& n = t.node(id);
  return StrCat(n.pci.bus_id, " (", n.label.empty() ? std::string(ToString(n.kind)) : n.label, ")");
}

CheckOutcome PciLinks(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Make(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
  const Topology& t = rep->topology;
  std::vector<std::string> ev, bdfs;
  bool width = false;
  int checked = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(t.nodes().size()); ++id) {
    const Node& n = t.node(id);
    if (n.kind != NodeKind::kGpu && n.kind != NodeKind::kNic) continue;
    if (n.pci.bus_id.empty() || n.pci.link.max_gen == 0) continue;
    ++checked;
    const PcieLink& l = n.pci.link;
    if (!l.Degraded()) continue;
    const bool narrow = l.max_width > 0 && l.width > 0 && l.width < l.max_width;
    width = width || narrow;
    ev.push_back(StrCat(Describe(t, id), ": running PCIe gen", l.gen, " x", l.width, ", capable of gen", l.max_gen, " x",
                        l.max_width, narrow ? "" : (n.kind == NodeKind::kGpu ? " (speed only: an idle GPU lowers its link speed)" : "")));
    bdfs.push_back(n.pci.bus_id);
  }
  if (checked == 0) return Make(CheckStatus::kSkip, "no GPU or NIC with PCIe link information");
  if (ev.empty()) return Make(CheckStatus::kPass, StrCat(checked, " GPU/NIC link(s) at full speed and width"));
  return Make(width ? CheckStatus::kFail : CheckStatus::kWarn,
              StrCat(ev.size(), " GPU/NIC PCIe link(s) below capability", width ? " (fewer lanes: bandwidth lost for good)" : ""),
              ev,
              StrCat("check under load: lspci -vv -s ", bdfs[0],
                     " | grep -E 'LnkCap|LnkSta'; if still low, reseat the card or riser and set the slot to Auto/max "
                     "gen in the BIOS"));
}

CheckOutcome AcsP2p(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Make(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
  const Topology& t = rep->topology;
  if (t.GpuCount() < 2) return Make(CheckStatus::kSkip, StrCat(t.GpuCount(), " GPU(s): peer access needs two"));
  std::set<std::string> acs(rep->system.acs_enabled_bridges.begin(), rep->system.acs_enabled_bridges.end());
  std::map<std::string, std::vector<std::string>> above;  // bridge -> GPUs under it
  for (NodeId g : t.Gpus())
    for (NodeId p = t.node(g).parent; p != kNoNode; p = t.node(p).parent)
      if (acs.count(t.node(p).pci.bus_id)) above[t.node(p).pci.bus_id].push_back(Describe(t, g));
  std::vector<std::string> ev;
  for (const auto& [bridge, gpus] : above) ev.push_back(StrCat("bridge ", bridge, ": ACS redirect enabled above ", Join(gpus, ", ")));
  const bool no_p2p = rep->gpu.cuda_available && rep->gpu.AnyPairWithoutP2p();
  if (no_p2p) ev.push_back("CUDA: cuDeviceCanAccessPeer reports at least one GPU pair without peer access");
  if (rep->system.iommu_present && !rep->system.iommu_passthrough)
    ev.push_back("IOMMU enabled without iommu=pt: P2P traffic is translated by the IOMMU");
  if (above.empty()) {
    if (no_p2p) return Make(CheckStatus::kWarn, "some GPU pairs have no peer access (no ACS bridge found: VM or platform)", ev,
                            "expected on many VMs; NCCL falls back to SHM. Check `nvidia-smi topo -p2p r`");
    return Make(CheckStatus::kPass, StrCat("no ACS redirect on bridges above the ", t.GpuCount(), " GPUs"), ev);
  }
  std::vector<std::string> cmds;
  for (const auto& [bridge, gpus] : above) cmds.push_back(StrCat("setpci -s ", bridge, " ECAP_ACS+6.w=0000"));
  return Make(no_p2p ? CheckStatus::kFail : CheckStatus::kWarn,
              StrCat("ACS redirect on ", above.size(), " bridge(s) above GPUs: P2P goes through the root complex or is blocked"),
              ev,
              StrCat(Join(cmds, "; "), "  (as root, not persistent; or disable ACS in the BIOS). If it cannot be changed: "
                                       "export NCCL_P2P_DISABLE=1"));
}

CheckOutcome RdmaPorts(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Make(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
  const Topology& t = rep->topology;
  std::vector<std::string> ev, down;
  int ports = 0;
  bool roce = false;
  for (NodeId id : t.Nics()) {
    const NicInfo& nic = t.node(id).nic;
    for (const auto& p : nic.ports) {
      ++ports;
      ev.push_back(StrCat(nic.name, " port ", p.port, ": ", p.state.empty() ? "?" : p.state, " ", p.phys_state, " ",
                          p.link_layer, " ", p.speed_gbps, " Gb/s"));
      if (p.state != "ACTIVE") down.push_back(StrCat(nic.name, ":", p.port));
      if (p.link_layer == "Ethernet") roce = true;
    }
  }
  if (ports == 0) return Make(CheckStatus::kSkip, "no RDMA ports (no InfiniBand/RoCE/EFA device)");
  if (down.size() == static_cast<std::size_t>(ports))
    return Make(CheckStatus::kFail, "no RDMA port is ACTIVE: NCCL falls back to TCP sockets", ev,
                StrCat("check cabling and the subnet manager (ibstat; sminfo) for ", Join(down, " ")));
  if (!down.empty())
    return Make(CheckStatus::kWarn, StrCat(down.size(), " RDMA port(s) not ACTIVE"), ev,
                StrCat("exclude them: export NCCL_IB_HCA=^", Join(down, ",^"), "  or fix the link (ibstat)"));
  if (roce) {
    int v2_v4 = -1;
    for (const auto& g : rep->gids)
      if (g.type == "RoCE v2" && g.ipv4_mapped()) {
        v2_v4 = g.index;
        break;
      }
    for (const auto& g : rep->gids) ev.push_back(StrCat("GID ", g.device, ":", g.port, "[", g.index, "] ", g.gid, " ", g.type, " ", g.ndev));
    if (v2_v4 < 0)
      return Make(CheckStatus::kWarn, "RoCE ports without a RoCE v2 IPv4 GID: traffic cannot be routed across subnets", ev,
                  "assign an IPv4 address to the RoCE netdev; NCCL then needs NCCL_IB_GID_INDEX of its RoCE v2 entry");
    return Make(CheckStatus::kPass, StrCat(ports, " RDMA port(s) ACTIVE; RoCE v2 IPv4 GID at index ", v2_v4), ev,
                StrCat("export NCCL_IB_GID_INDEX=", v2_v4, "  (if not already set)"));
  }
  return Make(CheckStatus::kPass, StrCat(ports, " RDMA port(s) ACTIVE"), ev);
}

}  // namespace

void RegisterTopologyChecks(CheckRegistry& r) {
  r.Add({{"pci.link", "GPU and NIC PCIe links run at full speed and width", "node"}, PciLinks});
  r.Add({{"p2p.acs", "No ACS redirect between GPUs (peer-to-peer possible)", "gpu"}, AcsP2p});
  r.Add({{"rdma.ports", "RDMA ports ACTIVE, RoCE v2 GID available", "rdma"}, RdmaPorts});
}

}  // namespace commkit::diagnostics
