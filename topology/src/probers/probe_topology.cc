// ProbeTopology: sysfs PCI tree, NUMA, RDMA ports and GIDs, GPUDirect, NVML/CUDA facts -> Topology.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/topology/probe.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/libfabric.h"
#include "commkit/topology/verbs.h"
#include "probers/optional_library.h"

namespace commkit::topology {
namespace {

// A fact a replay does not have means the prober was skipped; one that is there but unreadable
// (a FIFO, a corrupt value: SystemView checks facts against their schema) means it failed.
ProberState FactState(const Status& s) { return s.code() == StatusCode::kNotFound ? ProberState::kSkipped : ProberState::kFailed; }
std::string FactDetail(const Status& s) {
  return s.code() == StatusCode::kNotFound ? StrCat("skipped: ", s.message()) : s.ToString();
}

constexpr std::string_view kPciDevices = "/sys/bus/pci/devices";

bool LooksLikeBdf(std::string_view s) {
  return s.size() == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.';
}

std::string Attr(const SystemView& v, const std::string& path) {
  auto r = v.ReadAttr(path);
  return r.ok() ? *r : std::string();
}

int SpeedToGen(const std::string& s) { return s.empty() ? 0 : PcieGenFromSpeedString(s); }
int ToInt(const std::string& s, int fallback = 0) {
  auto v = ParseInt(s);
  return v ? static_cast<int>(*v) : fallback;
}

// ACS control of a bridge from its config space (extended capability 0x000d); nullopt when the
// extended space is not readable (needs root).
std::optional<unsigned> AcsControl(const std::string& config) {
  if (config.size() < 0x104) return std::nullopt;
  auto u32 = [&](std::size_t off) {
    return static_cast<unsigned>(static_cast<unsigned char>(config[off])) |
           static_cast<unsigned>(static_cast<unsigned char>(config[off + 1])) << 8 |
           static_cast<unsigned>(static_cast<unsigned char>(config[off + 2])) << 16 |
           static_cast<unsigned>(static_cast<unsigned char>(config[off + 3])) << 24;
  };
  std::size_t off = 0x100;
  for (int guard = 0; guard < 64 && off >= 0x100 && off + 8 <= config.size(); ++guard) {
    unsigned hdr = u32(off);
    if (hdr == 0 || hdr == 0xffffffffu) break;
    if ((hdr & 0xffff) == 0x000d) return (u32(off + 4) >> 16) & 0xffff;
    off = (hdr >> 20) & 0xffc;
  }
  return 0u;  // readable, no ACS capability
}

struct PciDev {
  std::string bdf;
  std::vector<std::string> chain;  // bridges above, root first (BDFs)
  std::string root;                // "pci0000:00"
  std::string cls, vendor, device;
  int numa = -1;
};

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

using AddStatus = std::function<void(std::string, ProberState, std::string)>;

// hwloc's view: live, the snapshot is taken once and recorded as the facts "hwloc" (status) and
// "hwloc.xml"; replay reads both. Never fails the probe: problems become the prober's status.
void ProbeHwloc(const SystemView& view, ProbeReport& r, const AddStatus& add_status) {
  if (view.live() && view.root() != "/") {
    r.probers.push_back({"hwloc", ProberState::kSkipped,
                         StrCat("skipped: hwloc reads the real machine; this live view is rooted at ", view.root().string())});
    return;
  }
  std::optional<HwlocSnapshot> live;
  auto snapshot = [&]() -> const HwlocSnapshot& {
    if (!live) live = HwlocSnapshotLive();
    return *live;
  };
  auto status_fact = view.Fact("hwloc", [&] { return Result<std::string>(HwlocStatusToJson(snapshot())); });
  HwlocSnapshot st;
  if (!status_fact.ok()) {
    add_status("hwloc", FactState(status_fact.status()), FactDetail(status_fact.status()));
    return;
  }
  if (Status s = ParseHwlocStatus(*status_fact, st); !s.ok()) {
    add_status("hwloc", ProberState::kFailed, s.ToString());
    return;
  }
  if (!st.available) {
    // A build choice, or a node without libhwloc: not a problem with this machine.
    if (StartsWith(st.error, "commkit was built without hwloc") || IsLibraryUnavailable(kLibhwloc, st.error))
      r.probers.push_back({"hwloc", ProberState::kSkipped, StrCat("skipped: ", st.error)});
    else
      add_status("hwloc", ProberState::kFailed, StrCat("hwloc ", st.version, ": ", st.error));
    return;
  }
  auto xml = view.Fact("hwloc.xml", [&] { return Result<std::string>(snapshot().xml); });
  if (!xml.ok()) {
    add_status("hwloc", ProberState::kFailed, StrCat("hwloc.xml: ", xml.status().message()));
    return;
  }
  r.system.hwloc_version = st.version;
  auto merged = MergeHwloc(*xml, r, view.live() ? "hwloc live export" : (view.root() / ".commkit/facts/hwloc.xml").string());
  if (!merged.ok()) {
    add_status("hwloc", ProberState::kFailed, merged.status().ToString());
    return;
  }
  const HwlocMergeStats& m = *merged;
  add_status("hwloc", ProberState::kOk,
             StrCat("hwloc ", r.system.hwloc_version, ": ", m.numa_nodes, " NUMA node(s), ", r.system.packages,
                    " package(s); ", m.devices_localized, " device(s) placed on a NUMA node sysfs did not give, ",
                    m.nodes_added, " node(s) and ", m.names_added, " name(s) sysfs lacked"));
}

}  // namespace

std::string_view ToString(ProberState s) {
  switch (s) {
    case ProberState::kOk: return "ok";
    case ProberState::kSkipped: return "skipped";
    case ProberState::kFailed: return "failed";
  }
  return "unknown";
}

bool GidEntry::ipv4_mapped() const {
  std::string g = ToLower(gid);
  std::string hex;
  for (char c : g)
    if (c != ':') hex += c;
  return hex.size() == 32 && hex.compare(0, 20, "00000000000000000000") == 0 && hex.compare(20, 4, "ffff") == 0;
}

const ProberStatus* ProbeReport::Prober(std::string_view name) const {
  for (const auto& p : probers)
    if (p.name == name) return &p;
  return nullptr;
}

const DeviceLocality* ProbeReport::LocalityOf(std::string_view bus_id) const {
  const std::string canon = CanonicalBusId(bus_id);
  for (const auto& l : locality)
    if (l.bus_id == canon) return &l;
  return nullptr;
}

const NumaNodeInfo* ProbeReport::Numa(int os_index) const {
  for (const auto& n : numa)
    if (n.os_index == os_index) return &n;
  return nullptr;
}

Result<ProbeReport> ProbeTopology(const SystemView& view, const ProbeOptions& options) {
  ProbeReport r;
  Topology& topo = r.topology;
  topo.metadata().source = TopologySource::kProbed;
  topo.metadata().source_path = view.root().string();
  {
    auto host = view.ReadAttr("/proc/sys/kernel/hostname");
    if (host.ok()) topo.metadata().hostname = *host;
  }
  auto add_status = [&](std::string name, ProberState st, std::string detail) {
    if (st != ProberState::kOk) r.warnings.push_back(StrCat(name, ": ", detail));
    r.probers.push_back({std::move(name), st, std::move(detail)});
  };

  // ---- GPU runtime facts first: the PCI pass names GPUs from them. ----
  if (options.nvml) {
    auto fact = view.Fact("nvml", [] { return Result<std::string>(NvmlFact()); });
    if (!fact.ok()) {
      add_status("nvml", FactState(fact.status()), FactDetail(fact.status()));
    } else if (Status s = ParseNvmlFact(*fact, r.gpu); !s.ok()) {
      add_status("nvml", ProberState::kFailed, s.ToString());
    } else if (!r.gpu.nvml_available) {
      add_status("nvml", ProberState::kSkipped, StrCat("skipped: ", r.gpu.nvml_error));
    } else {
      add_status("nvml", ProberState::kOk, StrCat(r.gpu.gpus.size(), " GPU(s), driver ", r.gpu.driver_version));
    }
  }
  if (options.cuda) {
    auto fact = view.Fact("cuda", [] { return Result<std::string>(CudaFact()); });
    if (!fact.ok()) {
      add_status("cuda", FactState(fact.status()), FactDetail(fact.status()));
    } else if (Status s = ParseCudaFact(*fact, r.gpu); !s.ok()) {
      add_status("cuda", ProberState::kFailed, s.ToString());
    } else if (!r.gpu.cuda_available) {
      add_status("cuda", ProberState::kSkipped, StrCat("skipped: ", r.gpu.cuda_error));
    } else {
      add_status("cuda", ProberState::kOk, StrCat(r.gpu.can_access_peer.size(), " device(s)"));
    }
  }

  // ---- CPU / NUMA ----
  std::map<int, NodeId> cpu_of_numa;
  if (options.pci) {
    // Cloud machine identity: AWS Nitro puts the instance type in product_name ("p4d.24xlarge").
    if (auto v = view.ReadAttr("/sys/class/dmi/id/sys_vendor"); v.ok()) r.system.dmi_sys_vendor = *v;
    if (auto v = view.ReadAttr("/sys/class/dmi/id/product_name"); v.ok()) r.system.dmi_product_name = *v;
    if (auto info = view.ReadFile("/proc/cpuinfo"); info.ok()) {
      for (const auto& line : Split(*info, '\n', true)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key(Trim(std::string_view(line).substr(0, colon)));
        std::string value(Trim(std::string_view(line).substr(colon + 1)));
        if (key == "vendor_id" && r.system.cpu_vendor.empty()) r.system.cpu_vendor = value;
        if (key == "model name" && r.system.cpu_model.empty()) r.system.cpu_model = value;
        if (key == "flags" && (" " + value + " ").find(" hypervisor ") != std::string::npos) r.system.hypervisor = true;
      }
    }
    if (auto nodes = view.ListDir("/sys/devices/system/node"); nodes.ok()) {
      for (const auto& n : *nodes) {
        if (!StartsWith(n, "node") || !ParseInt(n.substr(4))) continue;
        Node cpu;
        cpu.kind = NodeKind::kCpu;
        cpu.cpu.numa_id = ToInt(n.substr(4));
        cpu.cpu.affinity_list = Attr(view, StrCat("/sys/devices/system/node/", n, "/cpulist"));
        cpu.cpu.vendor = r.system.cpu_vendor;
        cpu.label = StrCat("CPU", cpu.cpu.numa_id);
        NumaNodeInfo info;
        info.os_index = cpu.cpu.numa_id;
        info.cpulist = cpu.cpu.affinity_list;
        info.source = "sysfs";
        // "Node 0 MemTotal:       10840276 kB"
        if (auto mem = view.ReadFile(StrCat("/sys/devices/system/node/", n, "/meminfo"), 64 << 10); mem.ok()) {
          for (const auto& line : Split(*mem, '\n', true)) {
            auto f = Split(line, ' ', true);
            if (f.size() >= 4 && f[2] == "MemTotal:") info.memory_bytes = static_cast<std::uint64_t>(ParseInt(f[3]).value_or(0)) * 1024;
          }
        }
        r.numa.push_back(std::move(info));
        cpu_of_numa[cpu.cpu.numa_id] = topo.AddNode(std::move(cpu));
      }
    }
    if (cpu_of_numa.empty()) {
      r.warnings.push_back("pci: /sys/devices/system/node absent: one CPU node with unknown NUMA id");
      Node cpu;
      cpu.kind = NodeKind::kCpu;
      cpu.label = "CPU";
      cpu.cpu.vendor = r.system.cpu_vendor;
      cpu_of_numa[-1] = topo.AddNode(std::move(cpu));
    }
    r.system.kernel_cmdline = Attr(view, "/proc/cmdline");
    r.system.iommu_passthrough = (" " + r.system.kernel_cmdline + " ").find(" iommu=pt ") != std::string::npos;
    if (auto l = view.ListDir("/sys/class/iommu"); l.ok()) r.system.iommu_present = !l->empty();
    if (auto l = view.ListDir("/sys/kernel/iommu_groups"); l.ok()) r.system.iommu_groups = static_cast<int>(l->size());
  }

  // ---- PCI tree ----
  std::map<std::string, NodeId> node_of_bdf;
  std::map<std::string, NodeId> node_of_root;
  if (options.pci) {
    auto devs = view.ListDir(kPciDevices);
    if (!devs.ok()) {
      add_status("pci", ProberState::kFailed, StrCat("cannot list ", kPciDevices, ": ", devs.status().message()));
    } else {
      std::vector<PciDev> all;
      for (const auto& bdf : *devs) {
        PciDev d;
        d.bdf = CanonicalBusId(bdf);
        const std::string dir = StrCat(kPciDevices, "/", bdf);
        if (auto real = view.RealPath(dir); real.ok()) {
          for (const auto& part : Split(*real, '/', true)) {
            if (StartsWith(part, "pci") && part.find(':') != std::string::npos) d.root = part;
            else if (LooksLikeBdf(part)) d.chain.push_back(CanonicalBusId(part));
          }
          if (!d.chain.empty()) d.chain.pop_back();  // the device itself
        }
        d.cls = Attr(view, dir + "/class");
        d.vendor = Attr(view, dir + "/vendor");
        d.device = Attr(view, dir + "/device");
        d.numa = ToInt(Attr(view, dir + "/numa_node"), -1);
        all.push_back(std::move(d));
      }
      std::map<std::string, const PciDev*> by_bdf;
      for (const auto& d : all) by_bdf[d.bdf] = &d;
      auto interesting = [](const PciDev& d) {
        return (StartsWith(d.cls, "0x03") && d.vendor == "0x10de") ||    // NVIDIA display/3D
               (StartsWith(d.cls, "0x0680") && d.vendor == "0x10de") ||  // NVSwitch
               StartsWith(d.cls, "0x02");                                // network / InfiniBand
      };
      bool acs_unreadable = false;
      std::function<NodeId(const std::string&, int)> ensure = [&](const std::string& bdf, int numa_hint) -> NodeId {
        if (auto it = node_of_bdf.find(bdf); it != node_of_bdf.end()) return it->second;
        const PciDev* d = by_bdf.count(bdf) ? by_bdf[bdf] : nullptr;
        NodeId parent = kNoNode;
        int numa = d && d->numa >= 0 ? d->numa : numa_hint;
        if (d && !d->chain.empty()) {
          parent = ensure(d->chain.back(), numa);
        } else {
          std::string root = d ? d->root : "";
          auto it = node_of_root.find(root);
          if (it == node_of_root.end()) {
            Node hb;
            hb.kind = NodeKind::kHostBridge;
            hb.label = root.empty() ? "host bridge" : root;
            auto cpu = cpu_of_numa.count(numa) ? cpu_of_numa[numa] : cpu_of_numa.begin()->second;
            hb.parent = cpu;
            it = node_of_root.emplace(root, topo.AddNode(std::move(hb))).first;
          }
          parent = it->second;
        }
        Node n;
        n.parent = parent;
        n.pci.bus_id = bdf;
        const std::string dir = StrCat(kPciDevices, "/", bdf);
        if (d) {
          n.pci.class_code = d->cls;
          n.pci.vendor_id = d->vendor;
          n.pci.device_id = d->device;
        }
        n.pci.subsystem_vendor_id = Attr(view, dir + "/subsystem_vendor");
        n.pci.subsystem_device_id = Attr(view, dir + "/subsystem_device");
        n.pci.link.gen = SpeedToGen(Attr(view, dir + "/current_link_speed"));
        n.pci.link.max_gen = SpeedToGen(Attr(view, dir + "/max_link_speed"));
        n.pci.link.width = ToInt(Attr(view, dir + "/current_link_width"));
        n.pci.link.max_width = ToInt(Attr(view, dir + "/max_link_width"));
        if (d && StartsWith(d->cls, "0x0604")) {
          n.kind = NodeKind::kPciSwitch;
          n.label = StrCat("PCI ", bdf);
          if (auto cfg = view.ReadFile(dir + "/config", 4096); cfg.ok()) {
            auto acs = AcsControl(*cfg);
            if (!acs) acs_unreadable = true;
            else if (*acs & 0x0c) r.system.acs_enabled_bridges.push_back(bdf);  // Request/Completion Redirect
          }
        } else if (d && StartsWith(d->cls, "0x0680") && d->vendor == "0x10de") {
          n.kind = NodeKind::kNvSwitch;
          n.label = StrCat("NVSwitch ", bdf);
          r.system.nvswitch_present = true;
        } else if (d && StartsWith(d->cls, "0x03") && d->vendor == "0x10de") {
          n.kind = NodeKind::kGpu;
        } else if (d && StartsWith(d->cls, "0x02")) {
          n.kind = NodeKind::kNic;
          n.label = bdf;
          n.nic.kind = NicKind::kEthernet;
        } else {
          n.kind = NodeKind::kOtherPci;
          n.label = StrCat("PCI ", bdf);
        }
        NodeId id = topo.AddNode(std::move(n));
        node_of_bdf[bdf] = id;
        return id;
      };
      int gpu_index = 0;
      bool any_endpoint = false, any_switch_above = false;
      for (const auto& d : all) {
        if (!interesting(d)) continue;
        if (d.numa < 0 && r.system.numa_unknown == false) r.system.numa_unknown = true;
        NodeId id = ensure(d.bdf, d.numa);
        any_endpoint = true;
        if (!r.LocalityOf(d.bdf)) {
          DeviceLocality loc;
          loc.bus_id = d.bdf;
          loc.numa_id = d.numa;
          if (d.numa >= 0) {
            loc.source = "sysfs";
            loc.cpulist = Attr(view, StrCat(kPciDevices, "/", d.bdf, "/local_cpulist"));
          }
          r.locality.push_back(std::move(loc));
        }
        if (!d.chain.empty()) any_switch_above = true;
        Node& n = topo.node(id);
        if (n.kind == NodeKind::kGpu) {
          n.gpu.index = gpu_index++;
          n.label = StrCat("GPU", n.gpu.index);
          for (const auto& g : r.gpu.gpus) {
            if (CanonicalBusId(g.bus_id) != d.bdf) continue;
            n.gpu.nvml_index = g.index;
            n.gpu.name = g.name;
            n.gpu.uuid = g.uuid;
            n.gpu.sm = g.sm;
            n.gpu.memory_bytes = g.memory_bytes;
          }
        }
      }
      r.system.pci_tree_flat = any_endpoint && !any_switch_above;
      if (acs_unreadable) r.warnings.push_back("pci: ACS not checked (PCI extended config space is readable by root only)");
      add_status("pci", ProberState::kOk, StrCat(all.size(), " PCI functions, ", topo.GpuCount(), " GPU(s)"));
    }
  }
  // GPUs NVML sees but sysfs did not show (containers with a masked /sys): add them under the CPU.
  for (const auto& g : r.gpu.gpus) {
    if (!g.bus_id.empty() && node_of_bdf.count(CanonicalBusId(g.bus_id))) continue;
    Node n;
    n.kind = NodeKind::kGpu;
    n.parent = cpu_of_numa.empty() ? kNoNode : cpu_of_numa.begin()->second;
    n.pci.bus_id = CanonicalBusId(g.bus_id);
    n.gpu.index = static_cast<int>(topo.GpuCount());
    n.gpu.nvml_index = g.index;
    n.gpu.name = g.name;
    n.gpu.uuid = g.uuid;
    n.gpu.sm = g.sm;
    n.gpu.memory_bytes = g.memory_bytes;
    n.label = StrCat("GPU", n.gpu.index);
    NodeId id = topo.AddNode(std::move(n));
    if (!g.bus_id.empty()) node_of_bdf[CanonicalBusId(g.bus_id)] = id;
  }
  // NVLinks from NVML: count links per remote.
  for (const auto& g : r.gpu.gpus) {
    auto self = node_of_bdf.find(CanonicalBusId(g.bus_id));
    if (self == node_of_bdf.end()) continue;
    std::map<std::string, int> per_remote;
    for (const auto& rb : g.nvlink_remote_bus_ids) per_remote[CanonicalBusId(rb)]++;
    for (const auto& [remote, count] : per_remote) {
      auto other = node_of_bdf.find(remote);
      if (other == node_of_bdf.end() || other->second == self->second) continue;
      const bool to_gpu = topo.node(other->second).kind == NodeKind::kGpu;
      if (to_gpu && other->second < self->second) continue;  // add GPU-GPU bundles once
      Link l;
      l.kind = LinkKind::kNvLink;
      l.a = self->second;
      l.b = other->second;
      l.count = count;
      l.nvlink_version = NvLinkVersionForSm(g.sm);
      if (!to_gpu) l.target_class = "0x068000";
      topo.AddLink(l);
    }
  }
  // P2P overrides from NVML (by NVML index -> node).
  for (std::size_t i = 0; i < r.gpu.p2p_read.size() && i < r.gpu.gpus.size(); ++i) {
    for (std::size_t k = 0; k < r.gpu.p2p_read[i].size() && k < r.gpu.gpus.size(); ++k) {
      if (i == k) continue;
      auto a = node_of_bdf.find(CanonicalBusId(r.gpu.gpus[i].bus_id));
      auto b = node_of_bdf.find(CanonicalBusId(r.gpu.gpus[k].bus_id));
      if (a == node_of_bdf.end() || b == node_of_bdf.end()) continue;
      topo.AddP2pOverride({a->second, b->second, 'r', r.gpu.p2p_read[i][k]});
    }
  }

  // ---- Network ----
  if (options.network) {
    auto net = ProbeNetwork(view);
    if (!net.ok()) {
      add_status("network", ProberState::kFailed, net.status().message());
    } else {
      r.network = std::move(*net);
      for (const auto& w : r.network.warnings) r.warnings.push_back(StrCat("network: ", w));
      for (const auto& nif : r.network.interfaces) {
        if (nif.pci_address.empty()) continue;
        auto it = node_of_bdf.find(CanonicalBusId(nif.pci_address));
        if (it == node_of_bdf.end()) continue;
        Node& n = topo.node(it->second);
        if (n.kind != NodeKind::kNic) continue;
        n.nic.netdevs.push_back(nif.name);
        if (n.nic.name.empty() || n.nic.name == n.pci.bus_id) {
          n.nic.name = nif.name;
          n.label = nif.name;
        }
        if (n.nic.ports.empty() && nif.speed_mbps) {
          NicPort p;
          p.state = nif.up ? "ACTIVE" : "DOWN";
          p.link_layer = "Ethernet";
          p.speed_gbps = static_cast<double>(*nif.speed_mbps) / 1000;
          p.mtu = nif.mtu;
          n.nic.ports.push_back(p);
        }
      }
      add_status("network", ProberState::kOk, StrCat(r.network.interfaces.size(), " interface(s), ", r.network.addresses.size(), " address(es)"));
    }
  }

  // ---- RDMA ----
  if (options.rdma) {
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
    for (const char* path : {"/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "/opt/amazon/ofi-nccl/lib/libnccl-net.so",
                             "/opt/aws-ofi-nccl/lib/libnccl-net.so", "/usr/local/lib/libnccl-net.so",
                             "/usr/lib/x86_64-linux-gnu/libnccl-net.so", "/usr/lib64/libnccl-net.so"}) {
      if (view.Exists(path)) {
        r.system.ofi_nccl_plugin = path;
        break;
      }
    }
    auto ibdevs = view.ListDir("/sys/class/infiniband");
    if (!ibdevs.ok()) {
      add_status("rdma", ProberState::kSkipped, "skipped: no /sys/class/infiniband (no RDMA devices or driver)");
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
          n.parent = cpu_of_numa.empty() ? kNoNode : cpu_of_numa.begin()->second;
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
      add_status("rdma", ProberState::kOk, StrCat(ibdevs->size(), " RDMA device(s), ", r.gids.size(), " GID(s)"));
    }
  }
  // ---- libibverbs: port attributes and GID types where sysfs was silent (recorded as a fact). ----
  if (options.verbs) {
    auto fact = view.Fact("verbs", [] { return Result<std::string>(VerbsFact()); });
    if (!fact.ok()) {
      add_status("verbs", FactState(fact.status()), FactDetail(fact.status()));
    } else if (auto v = ParseVerbsFact(*fact); !v.ok()) {
      add_status("verbs", ProberState::kFailed, v.status().ToString());
    } else if (!v->available) {
      add_status("verbs", ProberState::kSkipped, StrCat("skipped: ", v->error));
    } else {
      const int added = MergeVerbsReport(*v, r);
      add_status("verbs", ProberState::kOk,
                 v->devices.empty()
                     ? StrCat("no RDMA devices", v->error.empty() ? "" : " (" + v->error + ")")
                     : StrCat(v->devices.size(), " device(s), ", added, " fact(s) sysfs lacked",
                              v->error.empty() ? "" : "; " + v->error));
    }
  }
  // ---- libfabric: EFA devices as the provider sees them (recorded as a fact). ----
  if (options.libfabric) {
    auto fact = view.Fact("libfabric", [] { return Result<std::string>(LibfabricFact("efa")); });
    if (!fact.ok()) {
      add_status("libfabric", FactState(fact.status()), FactDetail(fact.status()));
    } else if (auto f = ParseLibfabricFact(*fact); !f.ok()) {
      add_status("libfabric", ProberState::kFailed, f.status().ToString());
    } else if (!f->available) {
      // Absence of EFA is the normal case off AWS: a status line, not a warning.
      r.probers.push_back({"libfabric", ProberState::kSkipped, StrCat("skipped: ", f->error)});
    } else {
      const int added = MergeFabricReport(*f, r);
      add_status("libfabric", ProberState::kOk,
                 StrCat("libfabric ", f->version, ", ", f->domains.size(), " ", f->provider, " domain(s), ", added,
                        " NIC(s) sysfs lacked"));
    }
  }
  // ---- hwloc: NUMA/package/CPU sets and device locality sysfs lacked (facts "hwloc", "hwloc.xml"). ----
  if (options.hwloc) ProbeHwloc(view, r, add_status);
  // Locality entries for every GPU/NIC/NVSwitch, in topology order, with current labels.
  {
    std::vector<DeviceLocality> ordered;
    for (const Node& n : topo.nodes()) {
      if (n.kind != NodeKind::kGpu && n.kind != NodeKind::kNic && n.kind != NodeKind::kNvSwitch) continue;
      if (n.pci.bus_id.empty()) continue;
      DeviceLocality loc;
      if (const DeviceLocality* known = r.LocalityOf(n.pci.bus_id)) loc = *known;
      loc.bus_id = n.pci.bus_id;
      loc.label = n.label;
      if (loc.cpulist.empty() && loc.numa_id >= 0)
        if (const NumaNodeInfo* numa = r.Numa(loc.numa_id)) loc.cpulist = numa->cpulist;
      ordered.push_back(std::move(loc));
    }
    r.locality = std::move(ordered);
  }
  if (Status s = topo.Validate(); !s.ok()) r.warnings.push_back(StrCat("probed topology is inconsistent: ", s.message()));
  return r;
}

}  // namespace commkit::topology
