// hwloc XML importer (v1 and v2 formats, as written by `lstopo --of xml`).
//
// CPUs: one per Package (v1 "Socket"); NUMA id from the NUMANode inside/above it. I/O: Bridge
// "0-1" = host bridge; PCI-PCI bridges are collapsed the way NCCL does it (a device hangs off the
// upstream port two bridge levels up): bridges at even depth >= 2 become PCI switches, odd-depth
// bridges (root ports, downstream ports) are dropped. PCIDev class 03xx from NVIDIA (or with a
// cuda/nvml OSDev) = GPU, 02xx or an OpenFabrics/network OSDev = NIC, subtype NVSwitch or class
// 0680 from NVIDIA = NVSwitch. NVLinkBandwidth distances become NVLink links.
#include <algorithm>
#include <cmath>
#include <map>

#include <pugixml.hpp>

#include "commkit/common/strings.h"
#include "commkit/common/text.h"
#include "commkit/topology/import.h"
#include "import/xml_load.h"

namespace commkit::topology {
namespace {

constexpr int kMaxDepth = 128;
constexpr std::size_t kMaxMatrix = 4096;

bool StartsWithDigits(std::string_view s, std::string_view prefix) {
  if (s.size() <= prefix.size() || s.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(prefix.size()), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

class HwlocReader {
 public:
  HwlocReader(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  Result<Topology> Run() {
    pugi::xml_document doc;
    COMMKIT_RETURN_IF_ERROR(internal::LoadXml(doc, text_, origin_));
    pugi::xml_node root = doc.child("topology");
    if (!root) return Status::DataLoss(StrCat(origin_, ": no <topology> element; not an hwloc XML"));
    topo_.metadata().source = TopologySource::kHwlocXml;
    topo_.metadata().source_path = std::string(origin_);
    topo_.metadata().format_version = root.attribute("version").as_string("1");
    for (pugi::xml_node o : root.children("object")) COMMKIT_RETURN_IF_ERROR(Walk(o, kNoNode, kNoNode, 0));
    AssignGpuIndices();
    for (pugi::xml_node d : root.children("distances2hetero")) COMMKIT_RETURN_IF_ERROR(ReadNvLinkDistances(d));
    for (pugi::xml_node d : root.children("distances2")) COMMKIT_RETURN_IF_ERROR(ReadNvLinkDistances(d));
    Status valid = topo_.Validate();
    if (!valid.ok()) return Status::DataLoss(StrCat(origin_, ": ", valid.message()));
    return std::move(topo_);
  }

 private:
  int Line(pugi::xml_node n) const { return LineOfOffset(text_, n.offset_debug()); }
  Status Error(pugi::xml_node n, std::string_view what) const {
    return Status::DataLoss(StrCat(origin_, ":", Line(n), ": ", what));
  }

  // cpu: the CPU node this subtree belongs to; pci_parent: the model node devices attach to.
  Status Walk(pugi::xml_node o, NodeId cpu, NodeId pci_parent, int depth) {
    if (depth > kMaxDepth) return Error(o, "objects nested deeper than 128 levels");
    const std::string type = o.attribute("type").as_string();
    NodeId next_cpu = cpu;
    NodeId next_parent = pci_parent;
    if (type == "Package" || type == "Socket") {
      if (cpu != kNoNode && cpu == numa_cpu_) {
        // v1: the Socket below the NUMANode that already made this CPU: the same CPU, not a second one.
        CpuDetails(o, topo_.node(cpu));
      } else {
        next_cpu = AddCpu(o);
        next_parent = next_cpu;
      }
    } else if (type == "NUMANode") {
      COMMKIT_RETURN_IF_ERROR(NumaNode(o, cpu));
      if (cpu == kNoNode && !o.child("object").empty()) {  // v1: NUMANode above the Package
        next_cpu = AddCpu(o);
        next_parent = next_cpu;
        numa_cpu_ = next_cpu;
      }
    } else if (type == "Bridge") {
      COMMKIT_ASSIGN_OR_RETURN(next_parent, Bridge(o, EnsureCpu(cpu), pci_parent));
      if (next_cpu == kNoNode) next_cpu = EnsureCpu(cpu);
    } else if (type == "PCIDev") {
      COMMKIT_ASSIGN_OR_RETURN(next_parent, PciDev(o, pci_parent == kNoNode ? EnsureCpu(cpu) : pci_parent));
    } else if (type == "OSDev") {
      OsDev(o, pci_parent);
      return Status::Ok();
    }
    for (pugi::xml_node c : o.children("object")) {
      COMMKIT_RETURN_IF_ERROR(Walk(c, next_cpu, next_parent == kNoNode ? next_cpu : next_parent, depth + 1));
    }
    return Status::Ok();
  }

  NodeId AddCpu(pugi::xml_node o) {
    Node n;
    n.kind = NodeKind::kCpu;
    n.cpu.affinity_mask = o.attribute("cpuset").as_string();
    if (std::string_view(o.attribute("type").as_string()) == "NUMANode") n.cpu.numa_id = o.attribute("os_index").as_int(-1);
    // v2: the NUMANode is a (memory) child of the Package.
    for (pugi::xml_node c : o.children("object")) {
      if (std::string_view(c.attribute("type").as_string()) == "NUMANode") n.cpu.numa_id = c.attribute("os_index").as_int(-1);
    }
    CpuDetails(o, n);
    n.label = StrCat("CPU", topo_.Cpus().size());
    const NodeId id = topo_.AddNode(n);
    gp_[o.attribute("gp_index").as_string()] = id;
    return id;
  }

  // CPU vendor/model/family from a Package/Socket's info children (kept where already set).
  static void CpuDetails(pugi::xml_node o, Node& n) {
    for (pugi::xml_node info : o.children("info")) {
      const std::string_view name = info.attribute("name").as_string();
      auto set = [&](std::string& field) {
        if (field.empty()) field = info.attribute("value").as_string();
      };
      if (name == "CPUVendor") set(n.cpu.vendor);
      else if (name == "CPUModelNumber") set(n.cpu.model_id);
      else if (name == "CPUFamilyNumber") set(n.cpu.family_id);
    }
  }

  Status NumaNode(pugi::xml_node o, NodeId cpu) {
    if (cpu != kNoNode && topo_.node(cpu).cpu.numa_id < 0) topo_.node(cpu).cpu.numa_id = o.attribute("os_index").as_int(-1);
    return Status::Ok();
  }

  // I/O attached directly to the Machine (no Package above it): one synthetic CPU node.
  NodeId EnsureCpu(NodeId cpu) {
    if (cpu != kNoNode) return cpu;
    if (machine_cpu_ == kNoNode) {
      Node n;
      n.kind = NodeKind::kCpu;
      n.label = "CPU (machine)";
      machine_cpu_ = topo_.AddNode(n);
    }
    return machine_cpu_;
  }

  Result<NodeId> Bridge(pugi::xml_node o, NodeId cpu, NodeId parent) {
    const std::string bt = o.attribute("bridge_type").as_string();
    const int depth = o.attribute("depth").as_int(-1);
    if (StartsWith(bt, "0-")) {
      Node n;
      n.kind = NodeKind::kHostBridge;
      n.parent = cpu;
      n.label = StrCat("HostBridge ", o.attribute("bridge_pci").as_string());
      return topo_.AddNode(n);
    }
    if (depth >= 2 && depth % 2 == 0) {
      Node n;
      n.kind = NodeKind::kPciSwitch;
      n.parent = parent == kNoNode ? cpu : parent;
      n.pci.bus_id = o.attribute("pci_busid").as_string();
      COMMKIT_RETURN_IF_ERROR(PciType(o, n));
      if (!n.pci.bus_id.empty() && topo_.FindByBusId(n.pci.bus_id)) {
        return Error(o, StrCat("PCI bus id ", n.pci.bus_id, " appears twice"));
      }
      n.label = StrCat("PCI ", CanonicalBusId(n.pci.bus_id));
      const NodeId id = topo_.AddNode(n);
      gp_[o.attribute("gp_index").as_string()] = id;
      return id;
    }
    return parent == kNoNode ? cpu : parent;  // root/downstream port: collapsed
  }

  Status PciType(pugi::xml_node o, Node& n) {
    // "0302 [10de:1db8] [10de:131d] a1 00"
    const std::string t = o.attribute("pci_type").as_string();
    auto parts = Split(t, ' ', true);
    if (!parts.empty()) n.pci.class_code = StrCat("0x", ToLower(parts[0]), "00");
    if (parts.size() >= 2 && parts[1].size() == 11 && parts[1].front() == '[') {
      n.pci.vendor_id = StrCat("0x", ToLower(parts[1].substr(1, 4)));
      n.pci.device_id = StrCat("0x", ToLower(parts[1].substr(6, 4)));
    }
    if (parts.size() >= 3 && parts[2].size() == 11 && parts[2].front() == '[') {
      n.pci.subsystem_vendor_id = StrCat("0x", ToLower(parts[2].substr(1, 4)));
      n.pci.subsystem_device_id = StrCat("0x", ToLower(parts[2].substr(6, 4)));
    }
    // pci_link_speed is GB/s for the whole link; infer gen assuming x16 when width is unknown.
    auto speed = ParseDouble(o.attribute("pci_link_speed").as_string("0"));
    if (speed && *speed > 1.5) {
      for (int gen = 1; gen <= 6; ++gen) {
        for (int width : {16, 8, 4, 2, 1}) {
          if (std::fabs(PcieLaneGBps(gen) * width - *speed) < 0.05 * *speed) {
            if (n.pci.link.gen == 0) {
              n.pci.link.gen = gen;
              n.pci.link.width = width;
            }
          }
        }
      }
    }
    return Status::Ok();
  }

  Result<NodeId> PciDev(pugi::xml_node o, NodeId parent) {
    Node n;
    n.parent = parent;
    n.pci.bus_id = o.attribute("pci_busid").as_string();
    COMMKIT_RETURN_IF_ERROR(PciType(o, n));
    const std::string subtype = o.attribute("subtype").as_string();
    const std::string& cls = n.pci.class_code;
    bool gpu_osdev = false, nic_osdev = false;
    for (pugi::xml_node c : o.children("object")) {
      const std::string name = c.attribute("name").as_string();
      if (StartsWithDigits(name, "cuda") || StartsWithDigits(name, "nvml")) gpu_osdev = true;
      if (StartsWith(name, "mlx") || StartsWith(name, "eth") || StartsWith(name, "ib") || StartsWith(name, "en") ||
          StartsWith(name, "efa") || StartsWith(name, "hfi")) {
        nic_osdev = true;
      }
    }
    if (subtype == "NVSwitch" || (StartsWith(cls, "0x0680") && n.pci.vendor_id == "0x10de")) {
      n.kind = NodeKind::kNvSwitch;
    } else if ((StartsWith(cls, "0x03") && n.pci.vendor_id == "0x10de") || gpu_osdev) {
      n.kind = NodeKind::kGpu;
    } else if (StartsWith(cls, "0x02") || nic_osdev) {
      n.kind = NodeKind::kNic;
      n.nic.kind = StartsWith(cls, "0x0207") ? NicKind::kInfiniBand
                   : n.pci.vendor_id == "0x1d0f"  ? NicKind::kEfa
                                                  : NicKind::kEthernet;
    } else {
      n.kind = NodeKind::kOtherPci;
    }
    if (n.pci.bus_id.empty()) return Error(o, "PCIDev without pci_busid");
    n.label = StrCat("PCI ", CanonicalBusId(n.pci.bus_id));
    if (topo_.FindByBusId(n.pci.bus_id)) {
      // Hand-edited files repeat bus ids; keep the device (its label keeps the id) but not the id.
      topo_.metadata().notes.push_back(StrCat(origin_, ":", Line(o), ": PCI bus id ", n.pci.bus_id,
                                              " appears twice; the second device is kept without a bus id"));
      n.pci.bus_id.clear();
    }
    const NodeId id = topo_.AddNode(n);
    gp_[o.attribute("gp_index").as_string()] = id;
    if (n.kind == NodeKind::kGpu) gpu_order_.push_back(id);
    return id;
  }

  void OsDev(pugi::xml_node o, NodeId pci) {
    if (!topo_.Contains(pci)) return;
    gp_[o.attribute("gp_index").as_string()] = pci;
    Node& n = topo_.node(pci);
    const std::string name = o.attribute("name").as_string();
    if (n.kind == NodeKind::kGpu) {
      for (const char* prefix : {"cuda", "nvml"}) {
        if (StartsWithDigits(name, prefix)) {
          auto idx = ParseInt(std::string_view(name).substr(std::string_view(prefix).size()));
          if (idx && *idx < 100000) {
            if (std::string_view(prefix) == "cuda") n.gpu.cuda_index = static_cast<int>(*idx);
            else n.gpu.nvml_index = static_cast<int>(*idx);
          }
        }
      }
      for (pugi::xml_node info : o.children("info")) {
        const std::string_view key = info.attribute("name").as_string();
        if (key == "GPUModel") n.gpu.name = info.attribute("value").as_string();
        if (key == "NVIDIAUUID") n.gpu.uuid = info.attribute("value").as_string();
      }
    } else if (n.kind == NodeKind::kNic) {
      if (StartsWith(name, "mlx") || StartsWith(name, "efa") || StartsWith(name, "hfi") || StartsWith(name, "rdmap")) {
        n.nic.name = name;
      } else if (!name.empty()) {
        n.nic.netdevs.push_back(name);
      }
      if (n.nic.name.empty() && !n.nic.netdevs.empty()) n.label = n.nic.netdevs.front();
      if (!n.nic.name.empty()) n.label = n.nic.name;
    }
  }

  void AssignGpuIndices() {
    std::vector<int> used;
    for (NodeId id : gpu_order_) {
      Node& g = topo_.node(id);
      g.gpu.index = g.gpu.nvml_index >= 0 ? g.gpu.nvml_index : g.gpu.cuda_index;
      if (g.gpu.index >= 0 && std::find(used.begin(), used.end(), g.gpu.index) != used.end()) g.gpu.index = -1;
      if (g.gpu.index >= 0) used.push_back(g.gpu.index);
    }
    int next = 0;
    for (NodeId id : gpu_order_) {
      Node& g = topo_.node(id);
      if (g.gpu.index < 0) {
        while (std::find(used.begin(), used.end(), next) != used.end()) ++next;
        g.gpu.index = next;
        used.push_back(next);
      }
      g.label = StrCat("GPU", g.gpu.index);
    }
    for (NodeId id : topo_.Nics()) {
      Node& n = topo_.node(id);
      if (n.nic.name.empty()) n.nic.name = !n.nic.netdevs.empty() ? n.nic.netdevs.front() : n.label;
      n.label = n.nic.name;
    }
  }

  Status ReadNvLinkDistances(pugi::xml_node d) {
    if (std::string_view(d.attribute("name").as_string()) != "NVLinkBandwidth") return Status::Ok();
    std::vector<std::string> idx;
    for (pugi::xml_node i : d.children("indexes")) {
      for (auto& t : Split(i.text().as_string(), ' ', true)) idx.push_back(t);
    }
    std::vector<std::uint64_t> vals;
    for (pugi::xml_node v : d.children("u64values")) {
      for (auto& t : Split(v.text().as_string(), ' ', true)) {
        auto x = ParseInt(t);
        if (!x || *x < 0) return Error(v, StrCat("bad distance value '", t, "'"));
        vals.push_back(static_cast<std::uint64_t>(*x));
      }
    }
    const std::size_t n = idx.size();
    if (n == 0 || n > kMaxMatrix || vals.size() != n * n) {
      return Error(d, StrCat("NVLinkBandwidth matrix has ", vals.size(), " values for ", n, " objects"));
    }
    std::vector<NodeId> ids(n, kNoNode);
    for (std::size_t i = 0; i < n; ++i) {
      const auto colon = idx[i].find(':');
      const std::string gp = colon == std::string::npos ? idx[i] : idx[i].substr(colon + 1);
      if (auto it = gp_.find(gp); it != gp_.end()) ids[i] = it->second;
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = i + 1; j < n; ++j) {
        const std::uint64_t bw = std::max(vals[i * n + j], vals[j * n + i]);
        if (bw == 0 || ids[i] == kNoNode || ids[j] == kNoNode || ids[i] == ids[j]) continue;
        Link l;
        l.kind = LinkKind::kNvLink;
        l.a = ids[i];
        l.b = ids[j];
        l.bandwidth_gbps = static_cast<double>(bw) / 1000.0;
        // hwloc reports links x per-link MB/s: 20000 (NVLink1) or 25000 (NVLink2-4).
        if (bw % 25000 == 0) {
          l.count = static_cast<int>(std::min<std::uint64_t>(bw / 25000, 1024));
        } else if (bw % 20000 == 0) {
          l.count = static_cast<int>(std::min<std::uint64_t>(bw / 20000, 1024));
          l.nvlink_version = 1;
        } else {
          l.count = static_cast<int>(std::clamp<std::uint64_t>((bw + 12500) / 25000, 1, 1024));
        }
        topo_.AddLink(l);
      }
    }
    return Status::Ok();
  }

  std::string_view text_;
  std::string_view origin_;
  Topology topo_;
  std::map<std::string, NodeId> gp_;
  std::vector<NodeId> gpu_order_;
  NodeId machine_cpu_ = kNoNode;
  NodeId numa_cpu_ = kNoNode;  // v1: the CPU made from the NUMANode being walked (its Socket joins it)
};

}  // namespace

Result<Topology> ImportHwlocXml(std::string_view text, std::string_view origin) {
  if (text.size() > (64u << 20)) return Status::InvalidArgument(StrCat(origin, ": larger than 64 MiB"));
  return HwlocReader(text, origin).Run();
}

}  // namespace commkit::topology
