// The sysfs half of the PCI/CPU picture: /proc/cpuinfo, DMI identity, NUMA nodes, IOMMU, and the
// /sys/bus/pci/devices tree (bridge chains from each device's real path, link speed and width, ACS).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commkit/common/strings.h"
#include "commkit/topology/probe.h"
#include "probers/probe_steps.h"

namespace commkit::topology {
namespace {

constexpr std::string_view kPciDevices = "/sys/bus/pci/devices";

int SpeedToGen(const std::string& s) { return s.empty() ? 0 : PcieGenFromSpeedString(s); }

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

}  // namespace

// CPU vendor/model and hypervisor flag, DMI identity, one CPU node per NUMA node (or one of unknown
// NUMA id), kernel command line and IOMMU.
void ProbeCpusAndNuma(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  Topology& topo = ctx.report.topology;
  std::map<int, NodeId>& cpu_of_numa = ctx.cpu_of_numa;
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

// The /sys/bus/pci/devices tree: bridges become PCI switches under a host bridge per root bus, below
// the CPU of their NUMA node; GPUs, NVSwitches and NICs are the devices kept (with the bridges above).
void ProbePciTree(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  Topology& topo = ctx.report.topology;
  std::map<std::string, NodeId>& node_of_bdf = ctx.node_of_bdf;
  std::map<int, NodeId>& cpu_of_numa = ctx.cpu_of_numa;
  std::map<std::string, NodeId> node_of_root;
  auto devs = view.ListDir(kPciDevices);
  if (!devs.ok()) {
    ctx.AddStatus("pci", ProberState::kFailed, StrCat("cannot list ", kPciDevices, ": ", devs.status().message()));
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
    ctx.AddStatus("pci", ProberState::kOk, StrCat(all.size(), " PCI functions, ", topo.GpuCount(), " GPU(s)"));
  }
}

}  // namespace commkit::topology
