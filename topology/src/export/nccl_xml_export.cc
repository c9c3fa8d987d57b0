// NCCL topology XML exporter.
#include <set>
#include <sstream>
#include <vector>

#include <pugixml.hpp>

#include "commkit/common/strings.h"
#include "commkit/topology/export.h"

namespace commkit::topology {
namespace {

std::string NcclLinkSpeed(int gen) {
  switch (gen) {
    case 1: return "2.5 GT/s PCIe";
    case 2: return "5.0 GT/s PCIe";
    case 3: return "8.0 GT/s PCIe";
    case 4: return "16.0 GT/s PCIe";
    case 5: return "32.0 GT/s PCIe";
    case 6: return "64.0 GT/s PCIe";
    default: return "";
  }
}

void SetIf(pugi::xml_node n, const char* name, const std::string& value) {
  if (!value.empty()) n.append_attribute(name) = value.c_str();
}

class Writer {
 public:
  explicit Writer(const Topology& t) : t_(t) {}

  void Node(pugi::xml_node parent, NodeId id, int depth) {
    if (depth > 64) return;
    const commkit::topology::Node& n = t_.node(id);
    if (n.kind == NodeKind::kNic && n.pci.bus_id.empty()) {
      Net(parent.append_child("nic"), n);
      return;
    }
    if (n.pci.bus_id.empty()) {
      // NCCL XML has no host-bridge element: its devices sit directly under the <cpu>/<pci>.
      if (n.kind == NodeKind::kHostBridge || n.kind == NodeKind::kPciSwitch) {
        for (NodeId c : t_.Children(id)) Node(parent, c, depth + 1);
      }
      return;
    }
    if (n.kind == NodeKind::kNvSwitch && n.parent == kNoNode) return;
    pugi::xml_node x = parent.append_child("pci");
    SetIf(x, "busid", n.pci.bus_id);
    const bool class_fits = !n.pci.class_code.empty() &&
                            (n.kind != NodeKind::kNvSwitch || StartsWith(n.pci.class_code, "0x0680"));
    SetIf(x, "class", class_fits ? n.pci.class_code : DefaultClass(n.kind));
    SetIf(x, "vendor", n.pci.vendor_id);
    SetIf(x, "device", n.pci.device_id);
    SetIf(x, "subsystem_vendor", n.pci.subsystem_vendor_id);
    SetIf(x, "subsystem_device", n.pci.subsystem_device_id);
    SetIf(x, "link_speed", NcclLinkSpeed(n.pci.link.gen));
    if (n.pci.link.width > 0) x.append_attribute("link_width") = n.pci.link.width;
    if (n.kind == NodeKind::kGpu) {
      Gpu(x, n);
      exported_gpus_.insert(id);
    }
    if (n.kind == NodeKind::kNic && (!n.nic.name.empty() || n.nic.dev >= 0)) Net(x.append_child("nic"), n);
    for (NodeId c : t_.Children(id)) Node(x, c, depth + 1);
  }

 private:
  static std::string DefaultClass(NodeKind k) {
    switch (k) {
      case NodeKind::kPciSwitch: return "0x060400";
      case NodeKind::kGpu: return "0x030200";
      case NodeKind::kNvSwitch: return "0x068000";
      default: return "";
    }
  }

  void Gpu(pugi::xml_node pci, const commkit::topology::Node& n) {
    pugi::xml_node g = pci.append_child("gpu");
    g.append_attribute("dev") = n.gpu.index;
    if (n.gpu.sm > 0) g.append_attribute("sm") = n.gpu.sm;
    g.append_attribute("rank") = n.gpu.rank >= 0 ? n.gpu.rank : n.gpu.index;
    if (n.gpu.gdr) g.append_attribute("gdr") = *n.gpu.gdr ? 1 : 0;
    for (std::size_t li : t_.LinksOf(n.id)) {
      const Link& l = t_.links()[li];
      if (l.kind != LinkKind::kNvLink) continue;
      const commkit::topology::Node& other = t_.node(l.a == n.id ? l.b : l.a);
      if (other.pci.bus_id.empty()) continue;
      pugi::xml_node nv = g.append_child("nvlink");
      nv.append_attribute("target") = other.pci.bus_id.c_str();
      nv.append_attribute("count") = l.count;
      const std::string tclass = other.kind == NodeKind::kNvSwitch ? "0x068000"
                                 : other.kind == NodeKind::kGpu    ? "0x030200"
                                                                   : l.target_class;
      SetIf(nv, "tclass", tclass);
    }
  }

  static void Net(pugi::xml_node nic, const commkit::topology::Node& n) {
    pugi::xml_node net = nic.append_child("net");
    SetIf(net, "name", n.nic.name);
    if (n.nic.dev >= 0) net.append_attribute("dev") = n.nic.dev;
    const double gbps = n.nic.SpeedGbps();
    // A topology from any source may carry a speed no integer holds; NCCL reads an int, so leave it out.
    if (gbps > 0 && gbps < 1e12) net.append_attribute("speed") = static_cast<long long>(gbps * 1000.0 + 0.5);
    net.append_attribute("port") = n.nic.ports.empty() ? 1 : n.nic.ports.front().port;
    SetIf(net, "guid", n.nic.guid);
    if (n.nic.max_conn > 0) net.append_attribute("maxconn") = n.nic.max_conn;
    if (n.nic.gdr) net.append_attribute("gdr") = *n.nic.gdr ? 1 : 0;
  }

  const Topology& t_;

 public:
  std::set<NodeId> exported_gpus_;
};

// Why `n` could not be placed in NCCL's XML, for the error that replaces a file NCCL would misread.
std::string WhyNotExported(const Topology& t, const Node& n) {
  if (n.pci.bus_id.empty()) return StrCat(n.label, " (no PCI bus id)");
  for (NodeId p = n.parent; p != kNoNode && t.Contains(p); p = t.node(p).parent)
    if (t.node(p).kind == NodeKind::kCpu) return StrCat(n.label, " ", n.pci.bus_id, " (not reachable from its CPU)");
  return StrCat(n.label, " ", n.pci.bus_id, " (no CPU above it)");
}

}  // namespace

Result<std::string> ExportNcclXml(const Topology& topo) {
  pugi::xml_document doc;
  pugi::xml_node system = doc.append_child("system");
  system.append_attribute("version") = 1;
  Writer w(topo);
  for (NodeId cpu_id : topo.Cpus()) {
    const Node& c = topo.node(cpu_id);
    pugi::xml_node x = system.append_child("cpu");
    x.append_attribute("numaid") = c.cpu.numa_id;
    SetIf(x, "affinity", c.cpu.affinity_mask);
    SetIf(x, "arch", c.cpu.arch);
    SetIf(x, "vendor", c.cpu.vendor);
    SetIf(x, "familyid", c.cpu.family_id);
    SetIf(x, "modelid", c.cpu.model_id);
    for (NodeId child : topo.Children(cpu_id)) w.Node(x, child, 1);
  }
  // NCCL places every GPU by its PCI bus id under a <cpu>. A GPU that cannot be placed would make the
  // file describe a different machine (or, with none placed, an empty <system/> NCCL cannot use).
  std::vector<std::string> missing;
  for (NodeId g : topo.Gpus())
    if (!w.exported_gpus_.count(g)) missing.push_back(WhyNotExported(topo, topo.node(g)));
  if (!missing.empty()) {
    return Status::NotSupported(StrCat(
        "cannot export as NCCL topology XML: ", missing.size(), " of ", topo.GpuCount(), " GPU(s) cannot be placed: ",
        Join(missing, ", "), ". NCCL's XML needs each GPU's PCI bus id under its CPU; ", ToString(topo.metadata().source),
        " input does not carry them. Export from a probe on the machine itself (`commkit-topo export --format nccl-xml`), "
        "from its hwloc XML (`lstopo --of xml`), or use NCCL's own NCCL_TOPO_DUMP_FILE"));
  }
  if (topo.Cpus().empty()) {
    return Status::NotSupported(StrCat("cannot export as NCCL topology XML: the topology (", ToString(topo.metadata().source),
                                       ") has no CPU/NUMA node to place devices under, so the file would be an empty <system>"));
  }
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_default | pugi::format_no_declaration);
  return out.str();
}

}  // namespace commkit::topology
