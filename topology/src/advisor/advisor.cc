// NCCL / libfabric environment advice from a ProbeReport.
#include "commkit/topology/advisor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "platform_presets.h"

extern char** environ;

namespace commkit::topology {
namespace {

bool UnsuitableForPeers(std::string_view name) {
  return name == "lo" || StartsWith(name, "docker") || StartsWith(name, "veth") || StartsWith(name, "virbr") ||
         StartsWith(name, "br-") || StartsWith(name, "cni") || StartsWith(name, "flannel");
}

// A live probe or a replayed capture records its probers; an imported topology file (NCCL XML, hwloc
// XML, nvidia-smi text, commkit JSON) has none, and then the report holds no facts about the host
// beyond what the file encodes (no modules, libraries, port states, hypervisor, routes).
bool HasHostFacts(const ProbeReport& rep) { return !rep.probers.empty(); }

// Names where a fact derived from the topology model came from, for reason lines:
// "the imported topology (nccl-xml /path/p4d-24xl-topo.xml)" or "the probed topology".
std::string TopologyOrigin(const ProbeReport& rep) {
  const TopologyMetadata& m = rep.topology.metadata();
  if (HasHostFacts(rep)) return "the probed topology";
  std::string s = StrCat("the imported topology (", ToString(m.source));
  if (!m.source_path.empty()) s += StrCat(" ", m.source_path);
  return s + ")";
}

std::string NicName(const Node& n) { return !n.nic.name.empty() ? n.nic.name : n.label; }

// At most `max` items, then ", ... (N in all)".
std::string JoinSome(const std::vector<std::string>& items, std::size_t max) {
  if (items.size() <= max) return Join(items, ", ");
  std::vector<std::string> head(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(max));
  return StrCat(Join(head, ", "), ", ... (", items.size(), " in all)");
}

class Builder {
 public:
  Builder(const AdvisorOptions& o, Advice& a) : opts_(o), advice_(a) {}
  // Adds a recommendation; when the user set the variable, records theirs (never overridden).
  Recommendation& Add(std::string var, std::string value, std::string reason) {
    Recommendation r;
    r.variable = std::move(var);
    r.value = std::move(value);
    r.reason = std::move(reason);
    if (auto u = User(r.variable)) {
      r.user_set = true;
      r.user_value = *u;
    }
    advice_.settings.push_back(std::move(r));
    return advice_.settings.back();
  }
  // Records a user setting that contradicts the machine (also when we have no recommendation).
  void Conflict(const std::string& var, std::string why) {
    for (auto& r : advice_.settings)
      if (r.variable == var) {
        r.conflict = true;
        advice_.findings.push_back(StrCat(var, "=", r.user_value, ": ", why));
        return;
      }
    Recommendation r;
    r.variable = var;
    r.user_set = true;
    r.user_value = User(var).value_or("");
    r.conflict = true;
    r.reason = why;
    advice_.findings.push_back(StrCat(var, "=", r.user_value, ": ", why));
    advice_.settings.push_back(std::move(r));
  }
  std::optional<std::string> User(const std::string& var) const {
    auto it = opts_.env.find(var);
    if (it == opts_.env.end()) return std::nullopt;
    return it->second;
  }
  void Finding(std::string f) { advice_.findings.push_back(std::move(f)); }
  Recommendation* Existing(std::string_view var) {
    for (auto& r : advice_.settings)
      if (r.variable == var && !r.value.empty()) return &r;
    return nullptr;
  }

 private:
  const AdvisorOptions& opts_;
  Advice& advice_;
};

void SocketIfname(const ProbeReport& rep, const AdvisorOptions& opts, Builder& b) {
  const NetworkInfo& net = rep.network;
  if (!HasHostFacts(rep) && net.interfaces.empty()) {
    // A topology file has no interfaces or routes: nothing to choose from, and nothing to contradict.
    b.Finding(StrCat("NCCL_SOCKET_IFNAME not derived: ", TopologyOrigin(rep),
                     " records no network interfaces or routes; run `commkit-topo advise` on the host itself"));
    return;
  }
  std::string chosen, why;
  if (opts.master_addr) {
    auto m = InterfaceForAddress(net, *opts.master_addr);
    if (!m.ok()) {
      b.Finding(StrCat("MASTER_ADDR ", *opts.master_addr, ": ", m.status().message()));
    } else if (m->ifname == "lo") {
      b.Finding(StrCat("MASTER_ADDR ", *opts.master_addr, " is loopback: fine for a single node only"));
    } else {
      chosen = m->ifname;
      why = m->loopback ? StrCat("holds MASTER_ADDR ", *opts.master_addr, " (this host is the master)")
                        : StrCat("routes to MASTER_ADDR ", *opts.master_addr,
                                 m->route.is_default() ? std::string(" (default route)")
                                                       : StrCat(" (", m->route.destination, "/", m->route.prefix_len, ")"));
    }
  }
  if (chosen.empty() && !(opts.master_addr && InterfaceForAddress(net, *opts.master_addr).ok())) {
    for (const auto& r : net.routes)
      if (r.family == AddressFamily::kIPv4 && r.is_default() && !UnsuitableForPeers(r.ifname)) {
        chosen = r.ifname;
        why = "carries the IPv4 default route";
        break;
      }
    if (chosen.empty())
      for (const auto& nif : net.interfaces)
        if (nif.up && !nif.loopback && !nif.is_virtual && !UnsuitableForPeers(nif.name) &&
            std::any_of(nif.addresses.begin(), nif.addresses.end(),
                        [](const InterfaceAddress& a) { return a.family == AddressFamily::kIPv4; })) {
          chosen = nif.name;
          why = "is the first physical interface that is up with an IPv4 address";
          break;
        }
  }
  if (!chosen.empty() && UnsuitableForPeers(chosen)) {
    b.Finding(StrCat(chosen, " reaches the master but is a loopback/container/bridge interface; other nodes cannot use it"));
    chosen.clear();
  }
  if (!chosen.empty()) {
    const NetInterface* nif = net.Find(chosen);
    if (nif && !nif->up) b.Finding(StrCat(chosen, " is the interface to use but its link is ", nif->operstate));
    b.Add("NCCL_SOCKET_IFNAME", chosen, StrCat(chosen, " ", why, "; the same name must exist on every node"));
  }
  // What NCCL will actually do with the user's value (or by default).
  NcclSocketOptions so;
  so.socket_ifname = b.User("NCCL_SOCKET_IFNAME");
  so.socket_family = b.User("NCCL_SOCKET_FAMILY");
  so.comm_id = b.User("NCCL_COMM_ID");
  NcclSocketChoice pick = PredictNcclSocketInterfaces(net, so);
  if (so.socket_ifname) {
    if (!pick.found()) {
      b.Conflict("NCCL_SOCKET_IFNAME", "no interface on this host matches it (NCCL: 'Bootstrap : no socket interface found')");
    } else {
      const NetInterface* first = net.Find(pick.selected[0].ifname);
      if (first && !first->up && !first->loopback)
        b.Conflict("NCCL_SOCKET_IFNAME", StrCat("matches ", first->name, " whose link is ", first->operstate));
      else if (!chosen.empty() && pick.selected[0].ifname != chosen)
        b.Conflict("NCCL_SOCKET_IFNAME", StrCat("NCCL will use ", pick.selected[0].ifname, " but ", chosen, " ", why));
    }
  } else if (pick.found() && !chosen.empty() && pick.selected[0].ifname != chosen) {
    b.Finding(StrCat("without NCCL_SOCKET_IFNAME NCCL would pick ", pick.selected[0].ifname, " (rule '", pick.rule, "'), not ", chosen));
  }
  for (const auto& n : pick.notes) b.Finding(StrCat("NCCL socket selection: ", n));
}

// A GPU pair the topology model itself says has no peer access: an explicit P2P capability (read or
// write mode; nvidia-smi topo -p2p r|w, NVML in a probe) whose status is a "not supported" word
// (CNS, GNS, TNS, NS, DR, IOH, CNP). "U" (unknown) and "OK" say nothing against P2P. Path types
// alone (PHB/SYS) are not evidence: NCCL already keeps P2P within NCCL_P2P_LEVEL.
std::string ModelPairWithoutP2p(const ProbeReport& rep) {
  const Topology& t = rep.topology;
  for (const P2pOverride& o : t.p2p_overrides()) {
    if (o.mode != 'r' && o.mode != 'w') continue;
    if (o.status == "OK" || o.status == "U" || o.status == "X" || o.status.empty()) continue;
    if (!t.Contains(o.a) || !t.Contains(o.b) || o.a == o.b) continue;
    if (t.node(o.a).kind != NodeKind::kGpu || t.node(o.b).kind != NodeKind::kGpu) continue;
    return StrCat(t.node(o.a).label, "/", t.node(o.b).label, " P2P ", o.mode == 'r' ? "read" : "write", " status ", o.status,
                  " in ", TopologyOrigin(rep));
  }
  return "";
}

void PeerToPeer(const ProbeReport& rep, Builder& b) {
  const auto& gpu = rep.gpu;
  const std::size_t n = std::max({gpu.gpus.size(), gpu.can_access_peer.size(), rep.topology.GpuCount()});
  if (n < 2) return;
  std::string pair;
  for (std::size_t i = 0; i < gpu.p2p_read.size() && pair.empty(); ++i)
    for (std::size_t k = 0; k < gpu.p2p_read[i].size(); ++k)
      if (i != k && gpu.p2p_read[i][k] != "OK" && gpu.p2p_read[i][k] != "X") {
        pair = StrCat("GPU", i, "/GPU", k, " NVML P2P read status ", gpu.p2p_read[i][k]);
        break;
      }
  for (std::size_t i = 0; i < gpu.can_access_peer.size() && pair.empty(); ++i)
    for (std::size_t k = 0; k < gpu.can_access_peer[i].size(); ++k)
      if (i != k && !gpu.can_access_peer[i][k]) {
        pair = StrCat("GPU", i, "/GPU", k, " cuDeviceCanAccessPeer=0");
        break;
      }
  if (pair.empty()) pair = ModelPairWithoutP2p(rep);
  if (!pair.empty()) {
    auto& r = b.Add("NCCL_P2P_DISABLE", "1",
                    StrCat("GPUs have no peer access (", pair, "): P2P paths fail with 'peer access is not supported'; NCCL uses SHM"));
    if (r.user_set && r.user_value == "0")
      b.Conflict("NCCL_P2P_DISABLE", "P2P forced on but these GPUs cannot access each other");
    b.Finding("custom all-reduce kernels (vLLM/TRT-LLM/sglang) need P2P: disable them on this machine");
    return;
  }
  if (!rep.system.acs_enabled_bridges.empty()) {
    b.Add("NCCL_P2P_LEVEL", "NVL", StrCat("PCIe ACS redirect is enabled on ", Join(rep.system.acs_enabled_bridges, ","),
                                          ": PCIe P2P goes through the root complex (slow or hangs); disable ACS or keep P2P to NVLink"));
  } else if (rep.system.iommu_present && !rep.system.iommu_passthrough && rep.topology.GpuCount() > 1) {
    b.Finding("IOMMU is active without iommu=pt: PCIe peer-to-peer and GPUDirect may be slow or hang; boot with iommu=pt");
  }
}

void Rdma(const ProbeReport& rep, Builder& b) {
  // unknown: HCAs whose port state the report does not know (imported topology files carry none).
  std::vector<std::string> active, inactive, unknown, roce;
  int rdma_nics = 0;
  for (NodeId id : rep.topology.Nics()) {
    const Node& node = rep.topology.node(id);
    const NicInfo& nic = node.nic;
    if (nic.kind != NicKind::kInfiniBand && nic.kind != NicKind::kRoCE) continue;
    ++rdma_nics;
    const bool known = std::any_of(nic.ports.begin(), nic.ports.end(), [](const NicPort& p) { return !p.state.empty(); });
    if (!known) {
      unknown.push_back(NicName(node));
      continue;
    }
    bool up = std::any_of(nic.ports.begin(), nic.ports.end(), [](const NicPort& p) { return p.state == "ACTIVE"; });
    (up ? active : inactive).push_back(nic.name);
    if (nic.kind == NicKind::kRoCE && up) roce.push_back(nic.name);
  }
  if (rdma_nics > 0 && active.empty() && unknown.empty()) {
    b.Finding("no RDMA port is ACTIVE: NCCL falls back to sockets ('NET/IB : No device found')");
  } else if (!inactive.empty() && !active.empty()) {
    b.Add("NCCL_IB_HCA", "=" + Join(active, ","), StrCat("only active HCAs; ", Join(inactive, ","), " has no ACTIVE port"));
  }
  if (auto u = b.User("NCCL_IB_HCA")) {
    std::string spec = *u;
    bool matched = false;
    IfnameSpec s = ParseIfnameSpec(spec);
    for (const auto& name : active) matched |= MatchesIfnameSpec(s, name);
    for (const auto& name : unknown) matched |= MatchesIfnameSpec(s, name);
    if (!matched && rdma_nics > 0)
      b.Conflict("NCCL_IB_HCA", unknown.empty() ? std::string("matches no active HCA on this host")
                                                : StrCat("matches no HCA in ", TopologyOrigin(rep)));
  }
  if (!roce.empty()) {
    // The lowest index that is an IPv4-mapped RoCE v2 GID on every active RoCE device.
    std::optional<int> common;
    bool ok = true;
    for (const auto& dev : roce) {
      std::set<int> idx;
      for (const auto& g : rep.gids)
        if (g.device == dev && g.type.find("v2") != std::string::npos && g.ipv4_mapped()) idx.insert(g.index);
      if (idx.empty()) {
        ok = false;
        b.Finding(StrCat(dev, ": no IPv4-mapped RoCE v2 GID (configure an IPv4 address on its netdev)"));
        continue;
      }
      if (!common || idx.count(*common) == 0) {
        int candidate = *idx.begin();
        if (common && candidate != *common) ok = false;
        common = candidate;
      }
    }
    if (common) {
      auto& r = b.Add("NCCL_IB_GID_INDEX", std::to_string(*common),
                      StrCat("GID ", *common, " is the IPv4-mapped RoCE v2 entry", ok ? "" : " (differs between HCAs: check each)",
                             "; v1 or link-local GIDs fail with completion error 12"));
      if (r.user_set) {
        for (const auto& g : rep.gids)
          if (std::to_string(g.index) == r.user_value && g.device == roce[0] &&
              (g.type.find("v2") == std::string::npos || !g.ipv4_mapped()))
            b.Conflict("NCCL_IB_GID_INDEX", StrCat("GID ", g.index, " on ", g.device, " is '", g.type, "' ", g.gid, ", not IPv4-mapped RoCE v2"));
      }
    }
  }
  if (active.size() >= 2 && rep.topology.GpuCount() >= 2) {
    b.Add("NCCL_CROSS_NIC", "0", StrCat(active.size(), " rails: keep each ring on one NIC index across nodes (rail-optimised fabrics); use 1 if the fabric is not rail-optimised"));
  } else if (active.empty() && unknown.size() >= 2 && rep.topology.GpuCount() >= 2) {
    b.Add("NCCL_CROSS_NIC", "0",
          StrCat(unknown.size(), " IB/RoCE HCAs (", JoinSome(unknown, 4), ") in ", TopologyOrigin(rep),
                 ", port states not recorded there: keep each ring on one NIC index across nodes (rail-optimised fabrics); "
                 "use 1 if the fabric is not rail-optimised"));
  }
  // Loaded kernel modules are a host fact: an imported file does not say.
  if (HasHostFacts(rep) && rdma_nics > 0 && rep.topology.GpuCount() > 0 && !rep.system.nvidia_peermem && !rep.system.nv_peer_mem)
    b.Finding("GPUDirect RDMA unavailable: neither nvidia_peermem nor nv_peer_mem is loaded ('GPU Direct RDMA Disabled'); modprobe nvidia_peermem");
}

void Efa(const ProbeReport& rep, Builder& b) {
  // EFA from the probe (efa driver / libfabric efa provider), or from the topology model itself: an
  // imported NCCL/hwloc XML names the NICs (vendor 0x1d0f device 0xefa*), so an EFA box is known from
  // its file alone.
  std::vector<std::string> efa_nics;
  for (NodeId id : rep.topology.Nics()) {
    const Node& n = rep.topology.node(id);
    if (n.nic.kind == NicKind::kEfa) efa_nics.push_back(n.pci.bus_id.empty() ? NicName(n) : StrCat(NicName(n), " ", n.pci.bus_id));
  }
  if (!rep.system.efa_present && efa_nics.empty()) return;
  const bool from_model = !rep.system.efa_present;
  const std::string what = from_model ? StrCat(efa_nics.size(), " EFA NIC(s) in ", TopologyOrigin(rep), ": ", JoinSome(efa_nics, 2))
                                       : std::string("EFA devices present");
  auto& p = b.Add("FI_PROVIDER", "efa", StrCat(what, from_model ? "; " : ": ", "libfabric must use the efa provider"));
  if (p.user_set && p.user_value != "efa") b.Conflict("FI_PROVIDER", "this host has EFA devices; other providers fall back to TCP");
  b.Add("FI_EFA_USE_DEVICE_RDMA", "1",
        StrCat("EFA RDMA read (p4d/p5/trn1): GPUDirect over EFA", from_model ? StrCat(" (EFA NICs from ", TopologyOrigin(rep), ")") : ""));
  if (!HasHostFacts(rep)) {
    // Installed libraries and device nodes are host facts the file does not encode: say what is
    // needed instead of claiming it is missing.
    b.Finding(StrCat("aws-ofi-nccl plugin (libnccl-net.so) is needed for NCCL over EFA, else NCCL uses sockets over ENA: "
                     "install it on every node (not checked: ", TopologyOrigin(rep), " records no installed libraries)"));
    return;
  }
  if (rep.system.ofi_nccl_plugin.empty())
    b.Finding("aws-ofi-nccl plugin (libnccl-net.so) not found in the usual places: NCCL will use sockets over ENA; install it or set NCCL_NET_PLUGIN");
  else if (rep.system.ofi_nccl_plugin_loadable)
    b.Finding(StrCat("aws-ofi-nccl plugin found: ", rep.system.ofi_nccl_plugin));
  else
    b.Finding(StrCat("aws-ofi-nccl plugin installed at ", rep.system.ofi_nccl_plugin, " but NCCL would not load it (not on the "
                     "loader path): add its directory to LD_LIBRARY_PATH or set NCCL_NET_PLUGIN to its path"));
  if (rep.system.uverbs.empty())
    b.Finding("no /dev/infiniband/uverbs*: in a container pass the EFA devices (--device /dev/infiniband/uverbsN), else fi_getinfo finds no efa provider");
}

void Platform(const ProbeReport& rep, const std::optional<internal::PlatformMatch>& vendor, Builder& b) {
  const std::size_t gpus = rep.topology.GpuCount();
  const bool vendor_topo_file =
      vendor && std::any_of(vendor->settings.begin(), vendor->settings.end(),
                            [](const internal::PresetSetting& s) { return s.variable == "NCCL_TOPO_FILE"; });
  if (gpus > 0 && rep.system.hypervisor && (rep.system.pci_tree_flat || rep.system.numa_unknown) && !vendor_topo_file) {
    // hwloc may have placed the devices sysfs left at NUMA -1; then this host's own export is useful.
    const bool placed_by_hwloc =
        rep.system.numa_unknown &&
        std::any_of(rep.locality.begin(), rep.locality.end(), [](const DeviceLocality& l) { return l.source == "hwloc"; }) &&
        std::none_of(rep.locality.begin(), rep.locality.end(), [](const DeviceLocality& l) { return l.numa_id < 0; });
    // No path is recommended: there is no file at any standard place until someone writes one.
    if (auto u = b.User("NCCL_TOPO_FILE")) {
      b.Finding(StrCat("VM hides the PCIe tree (no switches / NUMA -1 in sysfs); NCCL_TOPO_FILE=", *u, " gives NCCL its layout"));
    } else {
      b.Finding(placed_by_hwloc
                    ? "VM hides the PCIe tree (no switches / NUMA -1 in sysfs): give NCCL a topology file: the cloud vendor's "
                      "for this machine, or `commkit-topo export --format nccl-xml -o FILE` on this host (hwloc placed every "
                      "GPU/NIC on its NUMA node), then NCCL_TOPO_FILE=FILE"
                    : "VM hides the PCIe tree (no switches / NUMA -1): give NCCL a topology file: the cloud vendor's for this "
                      "machine, or `commkit-topo export --format nccl-xml -o FILE` on a bare-metal twin, then NCCL_TOPO_FILE=FILE");
    }
  }
  if (!rep.system.nvswitch_present && !HasHostFacts(rep) && !rep.topology.NodesOfKind(NodeKind::kNvSwitch).empty()) {
    b.Finding(StrCat(rep.topology.NodesOfKind(NodeKind::kNvSwitch).size(), " NVSwitch(es) in ", TopologyOrigin(rep),
                     ": nvidia-fabricmanager must be running on such a host (else CUDA error 802 'system not yet initialized')"));
  }
  if (rep.system.nvswitch_present) {
    bool hopper = std::any_of(rep.gpu.gpus.begin(), rep.gpu.gpus.end(), [](const NvmlGpu& g) { return g.sm >= 90; });
    if (hopper && rep.system.hypervisor)
      b.Add("NCCL_NVLS_ENABLE", "0", "NVSwitch in a VM: NVLink SHARP multicast usually needs host fabric-manager support; avoid 'transport/nvls.cc' init failures");
    b.Finding("NVSwitch present: nvidia-fabricmanager must be running (else CUDA error 802 'system not yet initialized')");
  }
}

// The vendor's published settings for a recognised machine, each reason naming its source. A
// setting the generic rules already made keeps its reason and gains the vendor's; a different value
// gives way to the vendor's published one.
void VendorPreset(const internal::PlatformMatch& m, Builder& b) {
  b.Finding(StrCat("recognised ", m.name, " (", m.evidence, ")"));
  for (const auto& s : m.settings) {
    std::string reason = StrCat(m.name, ": ", s.why, " (source: ", s.source, ")");
    if (Recommendation* r = b.Existing(s.variable)) {
      if (r->value == s.value) {
        r->reason += "; " + reason;
      } else {
        r->reason = StrCat(reason, " (the generic rule said ", r->value, ": ", r->reason, ")");
        r->value = s.value;
      }
    } else {
      b.Add(s.variable, s.value, std::move(reason));
    }
  }
  for (const auto& n : m.notes) b.Finding(StrCat(m.name, ": ", n));
}

// Values and reasons can come from a capture or an imported file (interface and HCA names): the
// shell form quotes values and every comment is one line, so no data can run as a command when the
// output is sourced.
std::string Comment(std::string_view text) { return EscapeControl(text, /*keep_newlines=*/false); }

void Append(std::string& out, const Recommendation& r, bool env_file) {
  out += StrCat("# ", Comment(r.reason), "\n", env_file ? "" : "export ", r.variable, "=",
                env_file ? EscapeControl(r.value, false) : ShellQuote(EscapeControl(r.value, false)), "\n");
}

}  // namespace

namespace {

bool AdvisorVariable(std::string_view key) {
  return StartsWith(key, "NCCL_") || StartsWith(key, "FI_") || key == "MASTER_ADDR" || key == "CUDA_VISIBLE_DEVICES";
}

AdvisorOptions FromPairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
  AdvisorOptions o;
  for (const auto& [key, value] : pairs)
    if (AdvisorVariable(key)) o.env[key] = value;
  if (auto it = o.env.find("MASTER_ADDR"); it != o.env.end()) o.master_addr = it->second;
  return o;
}

}  // namespace

AdvisorOptions AdvisorOptions::FromEnvironment() {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string_view::npos) pairs.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return FromPairs(pairs);
}

AdvisorOptions AdvisorOptions::FromEnvFact(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& line : Split(text, '\n', /*skip_empty=*/true)) {
    auto eq = line.find('=');
    if (eq != std::string::npos && eq > 0) pairs.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return FromPairs(pairs);
}

std::string AdvisorOptions::EnvFact() {
  std::vector<std::string> lines;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (StartsWith(kv, "NCCL_") || StartsWith(kv, "FI_") || StartsWith(kv, "CUDA_VISIBLE_DEVICES=") ||
        StartsWith(kv, "LD_LIBRARY_PATH=") || StartsWith(kv, "TORCH_NCCL_") || StartsWith(kv, "UCX_") ||
        StartsWith(kv, "MASTER_ADDR=") || StartsWith(kv, "VIRTUAL_ENV=") || StartsWith(kv, "CONDA_PREFIX="))
      if (kv.find('\n') == std::string_view::npos) lines.emplace_back(kv);
  }
  std::sort(lines.begin(), lines.end());
  return Join(lines, "\n");
}

const Recommendation* Advice::Find(std::string_view variable) const {
  for (const auto& r : settings)
    if (r.variable == variable) return &r;
  return nullptr;
}

std::string Advice::ToShell() const {
  std::string out;
  for (const auto& r : settings) {
    if (r.user_set)
      out += Comment(StrCat("# ", r.variable, " already set by you to '", r.user_value, "'", r.conflict ? " (CONFLICT: " + r.reason + ")" : "")) + "\n";
    else if (!r.value.empty()) Append(out, r, false);
  }
  for (const auto& f : findings) out += StrCat("# note: ", Comment(f), "\n");
  return out;
}

std::string Advice::ToEnvFile() const {
  std::string out;
  for (const auto& r : settings)
    if (!r.user_set && !r.value.empty()) Append(out, r, true);
  return out;
}

std::string Advice::ToJson() const {
  nlohmann::json j;
  j["settings"] = nlohmann::json::array();
  for (const auto& r : settings)
    j["settings"].push_back({{"variable", r.variable}, {"value", r.value}, {"reason", r.reason},
                             {"user_set", r.user_set}, {"user_value", r.user_value}, {"conflict", r.conflict}});
  j["findings"] = findings;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

Advice Advise(const ProbeReport& report, const AdvisorOptions& options) {
  Advice advice;
  Builder b(options, advice);
  SocketIfname(report, options, b);
  PeerToPeer(report, b);
  Rdma(report, b);
  Efa(report, b);
  const std::optional<internal::PlatformMatch> vendor = internal::RecognisePlatform(report);
  Platform(report, vendor, b);
  if (vendor) VendorPreset(*vendor, b);
  return advice;
}

}  // namespace commkit::topology
