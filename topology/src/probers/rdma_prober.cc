// The sysfs half of RDMA: /sys/class/infiniband devices with their ports and GID tables, GPUDirect
// RDMA modules (nvidia_peermem, nv_peer_mem), /dev/infiniband/uverbs*, and the NCCL net plugin.
#include <string>
#include <vector>

#include "commkit/common/strings.h"
#include "commkit/topology/nccl_libraries.h"
#include "commkit/topology/probe.h"
#include "probers/probe_steps.h"

namespace commkit::topology {
namespace {

NicKind KindOf(const std::string& name, const std::string& driver, const std::string& link_layer) {
  if (StartsWith(name, "efa") || driver == "efa") return NicKind::kEfa;
  if (link_layer == "Ethernet") return NicKind::kRoCE;
  if (link_layer == "InfiniBand") return NicKind::kInfiniBand;
  return NicKind::kUnknown;
}

double RateGbps(const std::string& rate) {  // "100 Gb/sec (4X EDR)"
  auto f = Split(rate, ' ', true);
  if (f.empty()) return 0;
  return ParseDouble(f[0]).value_or(0);
}

}  // namespace

// GPUDirect RDMA modules, /dev/infiniband/uverbs*, the NCCL net plugin, and every RDMA device under
// /sys/class/infiniband with its ports and GID tables (kind: EFA, RoCE, InfiniBand).
void ProbeRdmaSysfs(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  Topology& topo = ctx.report.topology;
  std::map<std::string, NodeId>& node_of_bdf = ctx.node_of_bdf;
  r.system.nvidia_peermem = view.IsDirectory("/sys/module/nvidia_peermem");
  if (auto v = view.ReadAttr("/sys/kernel/mm/memory_peers/nv_mem/version"); v.ok()) {
    r.system.nv_peer_mem = true;
    r.system.nv_peer_mem_version = *v;
  } else if (view.IsDirectory("/sys/kernel/mm/memory_peers/nv_mem_nc")) {
    r.system.nv_peer_mem = true;
  }
  if (auto l = view.ListDir("/dev/infiniband"); l.ok())
    for (const auto& e : *l)
      if (StartsWith(e, "uverbs")) r.system.uverbs.push_back(e);
  const NcclLibraries nccl = FindNcclLibraries(view, NodeEnvironment(view));  // NCCL's own plugin search
  if (const auto loadable = nccl.Loadable(); !loadable.empty()) {
    r.system.ofi_nccl_plugin = loadable.front()->path;
    r.system.ofi_nccl_plugin_loadable = true;
  } else if (!nccl.unused_plugins.empty()) {
    r.system.ofi_nccl_plugin = nccl.unused_plugins.front();
  }
  auto ibdevs = view.ListDir("/sys/class/infiniband");
  if (!ibdevs.ok()) {
    ctx.AddStatus("rdma", ProberState::kSkipped, "skipped: no /sys/class/infiniband (no RDMA devices or driver)");
  } else {
    for (const auto& dev : *ibdevs) {
      const std::string dir = StrCat("/sys/class/infiniband/", dev);
      std::string bdf;
      if (auto real = view.RealPath(dir + "/device"); real.ok()) {
        auto parts = Split(*real, '/', true);
        for (auto it = parts.rbegin(); it != parts.rend(); ++it)
          if (LooksLikeBdf(*it)) { bdf = CanonicalBusId(*it); break; }
      }
      std::string driver;
      if (auto d = view.ReadLink(dir + "/device/driver"); d.ok()) {
        auto p = Split(*d, '/', true);
        if (!p.empty()) driver = p.back();
      }
      NicInfo info;
      info.name = dev;
      info.guid = Attr(view, dir + "/node_guid");
      std::string first_layer;
      if (auto ports = view.ListDir(dir + "/ports"); ports.ok()) {
        for (const auto& pn : *ports) {
          const std::string pd = StrCat(dir, "/ports/", pn);
          NicPort p;
          p.port = ToInt(pn, 1);
          p.state = Attr(view, pd + "/state");          // "4: ACTIVE"
          if (auto c = p.state.find(": "); c != std::string::npos) p.state = p.state.substr(c + 2);
          p.phys_state = Attr(view, pd + "/phys_state");  // "5: LinkUp"
          if (auto c = p.phys_state.find(": "); c != std::string::npos) p.phys_state = p.phys_state.substr(c + 2);
          p.link_layer = Attr(view, pd + "/link_layer");
          p.speed_gbps = RateGbps(Attr(view, pd + "/rate"));
          if (first_layer.empty()) first_layer = p.link_layer;
          if (auto gids = view.ListDir(pd + "/gids"); gids.ok()) {
            for (const auto& gi : *gids) {
              std::string gid = Attr(view, StrCat(pd, "/gids/", gi));
              if (gid.empty() || gid == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
              p.gids.push_back(gid);
              GidEntry e;
              e.device = dev;
              e.port = p.port;
              e.index = ToInt(gi);
              e.gid = gid;
              e.type = Attr(view, StrCat(pd, "/gid_attrs/types/", gi));
              e.ndev = Attr(view, StrCat(pd, "/gid_attrs/ndevs/", gi));
              r.gids.push_back(std::move(e));
            }
          }
          info.ports.push_back(std::move(p));
        }
      }
      info.kind = KindOf(dev, driver, first_layer);
      if (info.kind == NicKind::kEfa) r.system.efa_present = true;
      info.gdr = r.system.nvidia_peermem || r.system.nv_peer_mem || info.kind == NicKind::kEfa;
      NodeId id = kNoNode;
      if (auto it = node_of_bdf.find(bdf); !bdf.empty() && it != node_of_bdf.end()) {
        id = it->second;
      } else {
        Node n;
        n.kind = NodeKind::kNic;
        n.parent = ctx.FirstCpu();
        n.pci.bus_id = bdf;
        id = topo.AddNode(std::move(n));
        if (!bdf.empty()) node_of_bdf[bdf] = id;
      }
      Node& n = topo.node(id);
      auto netdevs = n.nic.netdevs;
      n.nic = std::move(info);
      n.nic.netdevs = netdevs;
      n.label = dev;
    }
    ctx.AddStatus("rdma", ProberState::kOk, StrCat(ibdevs->size(), " RDMA device(s), ", r.gids.size(), " GID(s)"));
  }
}

}  // namespace commkit::topology
