// Topology-based node checks: PCIe links running below capability, GPU peer access (ACS redirect on
// bridges above GPUs; GPU pairs without peer access vs NCCL_P2P_DISABLE), RDMA port state / RoCE GID
// type. They read the context's shared probe
// (CheckContext::topology: ProbeTopology through the context's SystemView, once per run), so
// captured trees replay.
#include <map>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/probe.h"
#include "check_support.h"

namespace commkit::diagnostics {
namespace {

using namespace commkit::topology;

using internal::Outcome;

// The run's shared probe (CheckContext::topology): every topology check reads the same report.
const Result<ProbeReport>& Probe(const CheckContext& ctx) { return ctx.topology(); }

std::string Describe(const Topology& t, NodeId id) {
  const Node& n = t.node(id);
  return StrCat(n.pci.bus_id, " (", n.label.empty() ? std::string(ToString(n.kind)) : n.label, ")");
}

CheckOutcome PciLinks(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Outcome(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
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
  if (checked == 0) return Outcome(CheckStatus::kSkip, "no GPU or NIC with PCIe link information");
  if (ev.empty()) return Outcome(CheckStatus::kPass, StrCat(checked, " GPU/NIC link(s) at full speed and width"));
  return Outcome(width ? CheckStatus::kFail : CheckStatus::kWarn,
              StrCat(ev.size(), " GPU/NIC PCIe link(s) below capability", width ? " (fewer lanes: bandwidth lost for good)" : ""),
              ev,
              StrCat("check under load: lspci -vv -s ", bdfs[0],
                     " | grep -E 'LnkCap|LnkSta'; if still low, reseat the card or riser and set the slot to Auto/max "
                     "gen in the BIOS"));
}

// nvidia-smi topo -p2p r legend for nvmlDeviceGetP2PStatus(READ).
std::string P2pStatusMeaning(const std::string& s) {
  if (s == "CNS") return "chipset not supported";
  if (s == "GNS") return "GPU not supported";
  if (s == "TNS") return "topology not supported";
  if (s == "NS") return "not supported";
  if (s == "DR") return "disabled by regkey";
  return "unknown";
}

// Unordered GPU pairs without peer access, "GPU0-GPU1". CUDA's cuDeviceCanAccessPeer is the authority
// when CUDA answered (it is what NCCL and CUDA IPC users ask; indices are CUDA device indices);
// otherwise NVML's P2P read status, where only a definite "not supported" counts ("U", a failed
// query, proves nothing). `source` says which one was used.
std::vector<std::string> PairsWithoutPeerAccess(const GpuRuntimeInfo& gpu, std::string& source, std::vector<std::string>& ev) {
  std::vector<std::string> pairs;
  if (gpu.cuda_available && gpu.can_access_peer.size() >= 2) {
    source = "CUDA cuDeviceCanAccessPeer";
    const auto& m = gpu.can_access_peer;
    for (std::size_t i = 0; i < m.size(); ++i)
      for (std::size_t k = i + 1; k < m.size(); ++k) {
        const bool ik = k < m[i].size() && m[i][k], ki = i < m[k].size() && m[k][i];
        if (ik && ki) continue;
        pairs.push_back(StrCat("GPU", i, "-GPU", k));
        ev.push_back(StrCat("CUDA: cuDeviceCanAccessPeer(", i, ", ", k, ") = ", ik ? 1 : 0, ", (", k, ", ", i, ") = ", ki ? 1 : 0));
      }
    return pairs;
  }
  const auto& p = gpu.p2p_read;
  if (p.size() < 2) return pairs;
  source = "NVML nvmlDeviceGetP2PStatus(READ)";
  auto status = [&](std::size_t i, std::size_t k) { return k < p[i].size() ? p[i][k] : std::string("U"); };
  auto bus = [&](std::size_t i) { return i < gpu.gpus.size() && !gpu.gpus[i].bus_id.empty() ? " (" + gpu.gpus[i].bus_id + ")" : std::string(); };
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t k = i + 1; k < p.size(); ++k) {
      const std::string a = status(i, k), b = status(k, i);
      const bool no = (a != "OK" && a != "U") || (b != "OK" && b != "U");
      if (!no) continue;
      pairs.push_back(StrCat("GPU", i, "-GPU", k));
      ev.push_back(StrCat("NVML: P2P read GPU", i, bus(i), " -> GPU", k, bus(k), " = ", a, " (", a == "OK" ? "ok" : P2pStatusMeaning(a),
                          "), back = ", b, " (", b == "OK" ? "ok" : P2pStatusMeaning(b), ")"));
    }
  return pairs;
}

// NCCL reads NCCL_P2P_DISABLE with strtol and disables P2P only for the value 1.
bool P2pDisabledByEnv(const std::map<std::string, std::string>& env) {
  auto it = env.find("NCCL_P2P_DISABLE");
  if (it == env.end()) return false;
  auto v = ParseInt(Trim(it->second));
  return v && *v == 1;
}

CheckOutcome AcsP2p(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Outcome(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
  const Topology& t = rep->topology;
  if (t.GpuCount() < 2) return Outcome(CheckStatus::kSkip, StrCat(t.GpuCount(), " GPU(s): peer access needs two"));
  std::set<std::string> acs(rep->system.acs_enabled_bridges.begin(), rep->system.acs_enabled_bridges.end());
  std::map<std::string, std::vector<std::string>> above;  // bridge -> GPUs under it
  for (NodeId g : t.Gpus())
    for (NodeId p = t.node(g).parent; p != kNoNode; p = t.node(p).parent)
      if (acs.count(t.node(p).pci.bus_id)) above[t.node(p).pci.bus_id].push_back(Describe(t, g));
  std::vector<std::string> ev;
  for (const auto& [bridge, gpus] : above) ev.push_back(StrCat("bridge ", bridge, ": ACS redirect enabled above ", Join(gpus, ", ")));
  std::string source;
  const std::vector<std::string> pairs = PairsWithoutPeerAccess(rep->gpu, source, ev);
  const bool no_p2p = !pairs.empty();
  if (rep->system.iommu_present && !rep->system.iommu_passthrough)
    ev.push_back("IOMMU enabled without iommu=pt: P2P traffic is translated by the IOMMU");
  if (rep->system.hypervisor) ev.push_back("running under a hypervisor (cpuinfo flag 'hypervisor')");
  const std::map<std::string, std::string> env = internal::NodeEnv(ctx);
  const bool disabled = P2pDisabledByEnv(env);
  if (auto it = env.find("NCCL_P2P_DISABLE"); it != env.end()) ev.push_back("NCCL_P2P_DISABLE=" + it->second);
  const std::size_t n = rep->gpu.cuda_available && rep->gpu.can_access_peer.size() >= 2 ? rep->gpu.can_access_peer.size()
                                                                                        : rep->gpu.p2p_read.size();
  const std::string which = n >= 2 && pairs.size() == n * (n - 1) / 2 && n > 2
                                ? StrCat("all ", pairs.size(), " pairs of GPU0..GPU", n - 1)
                                : Join(pairs, ", ");
  if (above.empty()) {
    if (!no_p2p) {
      if (source.empty()) ev.push_back("peer access unknown: neither CUDA nor NVML answered for these GPUs");
      return Outcome(CheckStatus::kPass,
                  StrCat("no ACS redirect on bridges above the ", t.GpuCount(), " GPUs",
                         source.empty() ? "" : StrCat("; every GPU pair has peer access (", source, ")")),
                  ev);
    }
    if (disabled)
      return Outcome(CheckStatus::kPass,
                  StrCat("no GPU peer access: ", which, " (", source, "); NCCL_P2P_DISABLE=1 is set, so NCCL uses shared "
                         "memory between them"),
                  ev);
    // Severity: warn, not fail. The node is not broken (VMs such as AWS g5/g6 and many PCIe boards have no
    // GPU peer access by design) and NCCL's own P2P transport checks cuDeviceCanAccessPeer and normally
    // falls back to shared memory; the failures come from code that enables peer access anyway.
    return Outcome(CheckStatus::kWarn,
                StrCat("no GPU peer access: ", which, " (", source, "; no ACS bridge: VM or platform, e.g. AWS g5) and "
                       "NCCL_P2P_DISABLE is not set: code that enables peer access fails with 'peer access is not supported "
                       "between these two devices' (CUDA error 217: custom all-reduce, CUDA IPC), and NCCL jobs on such VMs "
                       "have been reported to hang"),
                ev,
                "export NCCL_P2P_DISABLE=1   # in the job's environment on every node: NCCL uses shared memory between these "
                "GPUs; vLLM/sglang also need --disable-custom-all-reduce (TensorRT-LLM: use_custom_all_reduce=false)");
  }
  std::vector<std::string> cmds;
  for (const auto& [bridge, gpus] : above) cmds.push_back(StrCat("setpci -s ", bridge, " ECAP_ACS+6.w=0000"));
  // ACS blocking P2P is a platform fault to fix (BIOS/setpci); with NCCL_P2P_DISABLE=1 jobs run, slower.
  const CheckStatus status = no_p2p && !disabled ? CheckStatus::kFail : CheckStatus::kWarn;
  return Outcome(status,
              StrCat("ACS redirect on ", above.size(), " bridge(s) above GPUs: P2P goes through the root complex or is blocked",
                     no_p2p ? StrCat(" (no peer access: ", which, disabled ? "; NCCL_P2P_DISABLE=1 works around it" : "", ")") : ""),
              ev,
              StrCat(Join(cmds, "; "), "  (as root, not persistent; or disable ACS in the BIOS). If it cannot be changed: "
                                       "export NCCL_P2P_DISABLE=1"));
}

CheckOutcome RdmaPorts(const CheckContext& ctx) {
  const auto& rep = Probe(ctx);
  if (!rep.ok()) return Outcome(CheckStatus::kSkip, "cannot probe the topology: " + rep.status().ToString());
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
  if (ports == 0) return Outcome(CheckStatus::kSkip, "no RDMA ports (no InfiniBand/RoCE/EFA device)");
  if (down.size() == static_cast<std::size_t>(ports))
    return Outcome(CheckStatus::kFail, "no RDMA port is ACTIVE: NCCL falls back to TCP sockets", ev,
                StrCat("check cabling and the subnet manager (ibstat; sminfo) for ", Join(down, " ")));
  if (!down.empty())
    return Outcome(CheckStatus::kWarn, StrCat(down.size(), " RDMA port(s) not ACTIVE"), ev,
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
      return Outcome(CheckStatus::kWarn, "RoCE ports without a RoCE v2 IPv4 GID: traffic cannot be routed across subnets", ev,
                  "assign an IPv4 address to the RoCE netdev; NCCL then needs NCCL_IB_GID_INDEX of its RoCE v2 entry");
    return Outcome(CheckStatus::kPass, StrCat(ports, " RDMA port(s) ACTIVE; RoCE v2 IPv4 GID at index ", v2_v4), ev,
                StrCat("export NCCL_IB_GID_INDEX=", v2_v4, "  (if not already set)"));
  }
  return Outcome(CheckStatus::kPass, StrCat(ports, " RDMA port(s) ACTIVE"), ev);
}

}  // namespace

void RegisterTopologyChecks(CheckRegistry& r) {
  r.Add({{"pci.link", "GPU and NIC PCIe links run at full speed and width", "node"}, PciLinks});
  r.Add({{"p2p.acs", "GPU peer access: no ACS redirect, NCCL_P2P_DISABLE=1 where GPUs have none", "gpu"}, AcsP2p});
  r.Add({{"rdma.ports", "RDMA ports ACTIVE, RoCE v2 GID available", "rdma"}, RdmaPorts});
}

}  // namespace commkit::diagnostics
