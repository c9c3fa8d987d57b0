// NCCL topology XML importer and format detection.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <pugixml.hpp>

#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"
#include "commkit/common/text.h"
#include "commkit/topology/import.h"
#include "import/xml_load.h"
#include "commkit/topology/json.h"

namespace commkit::topology {
namespace {

constexpr std::size_t kMaxInputBytes = 64u << 20;
constexpr int kMaxDepth = 64;
constexpr double kMaxNetSpeedMbps = 1e9;

class NcclXmlReader {
 public:
  NcclXmlReader(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  Result<Topology> Run() {
    pugi::xml_document doc;
    COMMKIT_RETURN_IF_ERROR(internal::LoadXml(doc, text_, origin_));
    if (doc.child("graphs")) {
      return Status::InvalidArgument(StrCat(origin_, ": an NCCL graph file (<graphs>, NCCL_GRAPH_DUMP_FILE), ",
                                            "not a topology; pass the NCCL_TOPO_DUMP_FILE output instead"));
    }
    pugi::xml_node system = doc.child("system");
    if (!system) {
      return Status::DataLoss(StrCat(origin_, ": no <system> element; not an NCCL topology XML"));
    }
    topo_.metadata().source = TopologySource::kNcclXml;
    topo_.metadata().source_path = std::string(origin_);
    topo_.metadata().format_version = system.attribute("version").as_string();
    for (pugi::xml_node child : system.children()) {
      if (child.type() != pugi::node_element) continue;
      if (std::string_view(child.name()) == "cpu") {
        COMMKIT_RETURN_IF_ERROR(ReadCpu(child));
      } else {
        Note(child, StrCat("ignored <", child.name(), "> under <system>"));
      }
    }
    COMMKIT_RETURN_IF_ERROR(ResolveNvLinks());
    AssignGpuIndices();
    Status valid = topo_.Validate();
    if (!valid.ok()) return Status::DataLoss(StrCat(origin_, ": ", valid.message()));
    return std::move(topo_);
  }

 private:
  struct PendingNvLink {
    NodeId gpu;
    std::string target;
    int count;
    std::string tclass;
    int line;
  };

  int Line(pugi::xml_node n) const { return LineOfOffset(text_, n.offset_debug()); }
  void Note(pugi::xml_node n, std::string what) {
    topo_.metadata().notes.push_back(StrCat(origin_, ":", Line(n), ": ", what));
  }
  Status Error(pugi::xml_node n, std::string_view what) const {
    return Status::DataLoss(StrCat(origin_, ":", Line(n), ": ", what));
  }

  Result<int> IntAttr(pugi::xml_node n, const char* name, int fallback) const {
    pugi::xml_attribute a = n.attribute(name);
    if (!a || Trim(a.value()).empty()) return fallback;
    auto v = ParseInt(Trim(a.value()));
    if (!v || *v < -1 || *v > (1LL << 30)) {
      return Error(n, StrCat("<", n.name(), "> attribute ", name, "=\"", a.value(), "\" is not a valid integer"));
    }
    return static_cast<int>(*v);
  }

  Status ReadCpu(pugi::xml_node x) {
    Node n;
    n.kind = NodeKind::kCpu;
    COMMKIT_ASSIGN_OR_RETURN(n.cpu.numa_id, IntAttr(x, "numaid", -1));
    n.cpu.affinity_mask = x.attribute("affinity").as_string();
    n.cpu.arch = x.attribute("arch").as_string();
    n.cpu.vendor = x.attribute("vendor").as_string();
    n.cpu.family_id = x.attribute("familyid").as_string();
    n.cpu.model_id = x.attribute("modelid").as_string();
    n.label = n.cpu.numa_id >= 0 ? StrCat("CPU", n.cpu.numa_id) : StrCat("CPU?", topo_.Cpus().size());
    const NodeId id = topo_.AddNode(n);
    for (pugi::xml_node c : x.children()) {
      if (c.type() != pugi::node_element) continue;
      const std::string_view name = c.name();
      if (name == "pci") {
        COMMKIT_RETURN_IF_ERROR(ReadPci(c, id, 1));
      } else if (name == "nic") {
        COMMKIT_RETURN_IF_ERROR(ReadNic(c, id, kNoNode));
      } else {
        Note(c, StrCat("ignored <", name, "> under <cpu>"));
      }
    }
    return Status::Ok();
  }

  Status ReadPci(pugi::xml_node x, NodeId parent, int depth) {
    if (depth > kMaxDepth) return Error(x, "PCI tree nested deeper than 64 levels");
    const std::string bus = x.attribute("busid").as_string();
    if (bus.empty()) return Error(x, "<pci> without busid");
    const std::string cls = ToLower(x.attribute("class").as_string());
    const std::string vendor = ToLower(x.attribute("vendor").as_string());
    Node n;
    n.parent = parent;
    n.pci.bus_id = bus;
    n.pci.class_code = cls;
    n.pci.vendor_id = vendor;
    n.pci.device_id = x.attribute("device").as_string();
    n.pci.subsystem_vendor_id = x.attribute("subsystem_vendor").as_string();
    n.pci.subsystem_device_id = x.attribute("subsystem_device").as_string();
    n.pci.link.gen = PcieGenFromSpeedString(x.attribute("link_speed").as_string());
    COMMKIT_ASSIGN_OR_RETURN(n.pci.link.width, IntAttr(x, "link_width", 0));
    const bool has_children = static_cast<bool>(x.child("pci"));
    if (StartsWith(cls, "0x0604") || (cls.empty() && has_children)) {
      n.kind = NodeKind::kPciSwitch;
    } else if (x.child("gpu") || (StartsWith(cls, "0x03") && (vendor.empty() || vendor == "0x10de"))) {
      // NCCL makes a GPU only of a <pci> that has (or, for a static NCCL_TOPO_FILE, gets from
      // CUDA) a <gpu> child. Vendor files list NVIDIA GPUs without <gpu>; a display device of another
      // vendor without one (a BMC's VGA, vendor 0x1a03) never gets it.
      n.kind = NodeKind::kGpu;
    } else if (StartsWith(cls, "0x02") || x.child("nic")) {
      n.kind = NodeKind::kNic;
    } else if (StartsWith(cls, "0x0680") && vendor == "0x10de") {
      n.kind = NodeKind::kNvSwitch;
    } else if (has_children) {
      n.kind = NodeKind::kPciSwitch;
    } else {
      n.kind = NodeKind::kOtherPci;
      if (StartsWith(cls, "0x03"))
        Note(x, StrCat("<pci busid=\"", bus, "\"> is a display device of vendor ", vendor,
                       " without <gpu>: not a GPU to NCCL (e.g. a BMC's VGA)"));
      if (cls.empty()) Note(x, StrCat("<pci busid=\"", bus, "\"> has no class (NCCL reads it from sysfs)"));
    }
    if (topo_.FindByBusId(bus)) return Error(x, StrCat("PCI bus id ", bus, " appears twice"));
    n.label = StrCat("PCI ", CanonicalBusId(bus));
    const NodeId id = topo_.AddNode(n);
    if (n.kind == NodeKind::kGpu) {
      topo_.node(id).gpu.index = -1;
      gpu_order_.push_back(id);
    }
    if (n.kind == NodeKind::kNic) {
      Node& nic = topo_.node(id);
      nic.nic.kind = StartsWith(cls, "0x0207") ? NicKind::kInfiniBand
                     : (vendor == "0x1d0f" && StartsWith(ToLower(n.pci.device_id), "0xefa")) ? NicKind::kEfa
                     : vendor == "0x15b3" ? NicKind::kRoCE
                                          : NicKind::kEthernet;
      nic.nic.name = StrCat("NIC", nic_ordinal_++);
      nic.label = nic.nic.name;
    }
    for (pugi::xml_node c : x.children()) {
      if (c.type() != pugi::node_element) continue;
      const std::string_view name = c.name();
      if (name == "pci") {
        COMMKIT_RETURN_IF_ERROR(ReadPci(c, id, depth + 1));
      } else if (name == "gpu") {
        COMMKIT_RETURN_IF_ERROR(ReadGpu(c, id));
      } else if (name == "nic") {
        COMMKIT_RETURN_IF_ERROR(ReadNic(c, parent, id));
      } else {
        Note(c, StrCat("ignored <", name, "> under <pci>"));
      }
    }
    return Status::Ok();
  }

  Status ReadGpu(pugi::xml_node x, NodeId id) {
    Node& n = topo_.node(id);
    if (n.kind != NodeKind::kGpu) return Error(x, "<gpu> inside a <pci> that is not a GPU");
    int dev = 0, sm = 0, rank = 0, gdr = 0;
    COMMKIT_ASSIGN_OR_RETURN(dev, IntAttr(x, "dev", -1));
    COMMKIT_ASSIGN_OR_RETURN(sm, IntAttr(x, "sm", 0));
    COMMKIT_ASSIGN_OR_RETURN(rank, IntAttr(x, "rank", -1));
    COMMKIT_ASSIGN_OR_RETURN(gdr, IntAttr(x, "gdr", -1));
    Node& g = topo_.node(id);
    g.gpu.index = dev;
    g.gpu.cuda_index = dev;
    g.gpu.sm = sm;
    g.gpu.rank = rank;
    if (gdr >= 0) g.gpu.gdr = gdr != 0;
    for (pugi::xml_node c : x.children("nvlink")) {
      int count = 0;
      COMMKIT_ASSIGN_OR_RETURN(count, IntAttr(c, "count", 1));
      const std::string target = c.attribute("target").as_string();
      if (target.empty() || count <= 0) return Error(c, "<nvlink> needs a target and a positive count");
      nvlinks_.push_back({id, target, count, ToLower(c.attribute("tclass").as_string()), Line(c)});
    }
    return Status::Ok();
  }

  Status ReadNic(pugi::xml_node x, NodeId cpu_parent, NodeId pci_id) {
    for (pugi::xml_node net : x.children("net")) {
      NodeId id = pci_id;
      if (id == kNoNode || !topo_.node(id).nic.netdevs.empty() || topo_.node(id).kind != NodeKind::kNic ||
          topo_.node(id).nic.dev >= 0) {
        Node n;
        n.kind = NodeKind::kNic;
        n.parent = pci_id == kNoNode ? cpu_parent : pci_id;
        id = topo_.AddNode(n);
      }
      int dev = 0, port = 0, maxconn = 0, gdr = 0;
      COMMKIT_ASSIGN_OR_RETURN(dev, IntAttr(net, "dev", -1));
      COMMKIT_ASSIGN_OR_RETURN(port, IntAttr(net, "port", 1));
      COMMKIT_ASSIGN_OR_RETURN(maxconn, IntAttr(net, "maxconn", 0));
      COMMKIT_ASSIGN_OR_RETURN(gdr, IntAttr(net, "gdr", -1));
      Node& n = topo_.node(id);
      const std::string name = net.attribute("name").as_string();
      if (!name.empty()) n.nic.name = name;
      if (n.nic.name.empty()) n.nic.name = StrCat("NIC", nic_ordinal_++);
      n.label = n.nic.name;
      n.nic.dev = dev;
      n.nic.max_conn = maxconn;
      n.nic.guid = net.attribute("guid").as_string();
      if (gdr >= 0) n.nic.gdr = gdr != 0;
      NicPort p;
      p.port = port;
      // NCCL writes Mb/s. Today's fastest ports are 800 Gb/s; a value past 1 Pb/s is a corrupted file,
      // and it would poison every bandwidth the cost model derives from this NIC. (ParseDouble refuses
      // what is not a finite number.)
      const std::string_view speed_text = net.attribute("speed").as_string();
      if (!Trim(speed_text).empty()) {
        auto speed = ParseDouble(speed_text);
        if (!speed || *speed < 0 || *speed > kMaxNetSpeedMbps)
          return Error(net, StrCat("<net> speed=\"", speed_text, "\" is not a NIC speed in Mb/s (expected 0 to 1e9)"));
        p.speed_gbps = *speed / 1000.0;
      }
      n.nic.ports.push_back(p);
      if (pci_id == kNoNode && n.nic.kind == NicKind::kUnknown) {
        n.nic.kind = StartsWith(name, "eth") || StartsWith(name, "en") ? NicKind::kEthernet : NicKind::kUnknown;
      }
    }
    return Status::Ok();
  }

  Status ResolveNvLinks() {
    std::map<std::string, NodeId> switches;
    std::map<std::pair<NodeId, NodeId>, int> gpu_pairs;
    for (const auto& l : nvlinks_) {
      const std::string target = CanonicalBusId(l.target);
      auto found = topo_.FindByBusId(target);
      if (found && *found == l.gpu) {
        topo_.metadata().notes.push_back(
            StrCat(origin_, ":", l.line, ": NVLink from GPU ", target, " to itself (", l.count,
                   " links, tclass ", l.tclass, ") kept as unconnected NVLinks"));
        continue;
      }
      const bool is_switch = l.tclass == "0x068000" || (found && topo_.node(*found).kind == NodeKind::kNvSwitch);
      if (is_switch) {
        NodeId sw = kNoNode;
        if (found) {
          sw = *found;
          // An unclassified PCI device that NVLinks say is an NVSwitch (tclass 0x068000) is one.
          if (topo_.node(sw).kind == NodeKind::kOtherPci) topo_.node(sw).kind = NodeKind::kNvSwitch;
        } else if (auto it = switches.find(target); it != switches.end()) {
          sw = it->second;
        } else {
          Node n;
          n.kind = NodeKind::kNvSwitch;
          n.pci.bus_id = target;
          n.pci.class_code = "0x068000";
          n.label = StrCat("NVSwitch ", target);
          sw = topo_.AddNode(n);
          switches[target] = sw;
        }
        Link link;
        link.kind = LinkKind::kNvLink;
        link.a = l.gpu;
        link.b = sw;
        link.count = l.count;
        link.target_class = l.tclass;
        topo_.AddLink(link);
        continue;
      }
      if (!found || topo_.node(*found).kind != NodeKind::kGpu) {
        topo_.metadata().notes.push_back(StrCat(origin_, ":", l.line, ": NVLink target ", target,
                                                " is not a GPU or NVSwitch in this file; ignored"));
        continue;
      }
      auto key = std::minmax(l.gpu, *found);
      int& seen = gpu_pairs[{key.first, key.second}];
      seen = std::max(seen, l.count);  // both GPUs list the same bundle
    }
    for (const auto& [pair, count] : gpu_pairs) {
      Link link;
      link.kind = LinkKind::kNvLink;
      link.a = pair.first;
      link.b = pair.second;
      link.count = count;
      link.target_class = "0x030200";
      topo_.AddLink(link);
    }
    return Status::Ok();
  }

  void AssignGpuIndices() {
    // GPUs without <gpu dev> get the next free index in order of appearance.
    int next = 0;
    std::vector<int> used;
    for (NodeId id : gpu_order_) {
      if (topo_.node(id).gpu.index >= 0) used.push_back(topo_.node(id).gpu.index);
    }
    for (NodeId id : gpu_order_) {
      Node& g = topo_.node(id);
      if (g.gpu.index < 0) {
        while (std::find(used.begin(), used.end(), next) != used.end()) ++next;
        g.gpu.index = next;
        used.push_back(next);
      }
      g.label = StrCat("GPU", g.gpu.index);
    }
  }

  std::string_view text_;
  std::string_view origin_;
  Topology topo_;
  std::vector<PendingNvLink> nvlinks_;
  std::vector<NodeId> gpu_order_;
  int nic_ordinal_ = 0;
};

}  // namespace

std::string_view ToString(TopologyFormat format) {
  switch (format) {
    case TopologyFormat::kUnknown: return "unknown";
    case TopologyFormat::kNcclXml: return "nccl-xml";
    case TopologyFormat::kNcclGraphXml: return "nccl-graph-xml";
    case TopologyFormat::kHwlocXml: return "hwloc-xml";
    case TopologyFormat::kNvsmiMatrix: return "nvsmi-topo-m";
    case TopologyFormat::kNvsmiP2p: return "nvsmi-topo-p2p";
    case TopologyFormat::kJson: return "json";
  }
  return "unknown";
}

TopologyFormat DetectTopologyFormat(std::string_view text) {
  const std::string_view head = text.substr(0, 64 * 1024);
  if (head.find("<topology") != std::string_view::npos) return TopologyFormat::kHwlocXml;
  if (head.find("<graphs") != std::string_view::npos) return TopologyFormat::kNcclGraphXml;
  if (head.find("<system") != std::string_view::npos) return TopologyFormat::kNcclXml;
  const std::string_view t = Trim(head);
  if (!t.empty() && t.front() == '{') return TopologyFormat::kJson;
  if (head.find("GPU0") != std::string_view::npos) {
    // First data row decides: P2P status words vs path labels.
    for (const std::string& line : Split(head, '\n')) {
      std::vector<std::string> tok;
      for (const std::string& t2 : Split(line, ' ', true)) {
        for (const std::string& t3 : Split(t2, '\t', true)) tok.push_back(t3);
      }
      if (tok.size() < 2 || tok[0] != "GPU0" || tok[1] != "X") continue;
      for (std::size_t i = 1; i < tok.size(); ++i) {
        const std::string& c = tok[i];
        if (c == "OK" || c == "CNS" || c == "GNS" || c == "TNS" || c == "NS" || c == "DR" || c == "U" || c == "IOH" ||
            c == "CNP") {
          return TopologyFormat::kNvsmiP2p;
        }
      }
      return TopologyFormat::kNvsmiMatrix;
    }
  }
  return TopologyFormat::kUnknown;
}

Result<Topology> ImportNcclXml(std::string_view text, std::string_view origin) {
  if (text.size() > kMaxInputBytes) {
    return Status::InvalidArgument(StrCat(origin, ": larger than 64 MiB; not a topology file"));
  }
  return NcclXmlReader(text, origin).Run();
}

Result<Topology> ImportTopologyText(std::string_view text, std::string_view origin) {
  const TopologyFormat f = DetectTopologyFormat(text);
  switch (f) {
    case TopologyFormat::kNcclXml:
    case TopologyFormat::kNcclGraphXml:
      return ImportNcclXml(text, origin);
    case TopologyFormat::kHwlocXml:
      return ImportHwlocXml(text, origin);
    case TopologyFormat::kJson:
      return LoadJson(text, origin);
    case TopologyFormat::kNvsmiMatrix:
      return ImportNvsmiMatrix(text, origin);
    case TopologyFormat::kNvsmiP2p:
      return ImportNvsmiP2p(text, origin);
    case TopologyFormat::kUnknown:
      return Status::InvalidArgument(StrCat(origin, ": unrecognised topology format (expected NCCL XML, hwloc XML, ",
                                            "nvidia-smi topo -m/-p2p text or commkit JSON)"));
    default:
      return Status::NotSupported(StrCat(origin, ": ", ToString(f), " import is not implemented yet"));
  }
}

Result<Topology> ImportTopologyFile(const std::filesystem::path& path) {
  // Regular files only: a FIFO, a device or a symlink loop is refused without blocking.
  COMMKIT_ASSIGN_OR_RETURN(std::string data, ReadRegularFile(path, kMaxInputBytes, "topology file"));
  // Content decides; a .json name that does not sniff as JSON (e.g. a byte-order mark first) still
  // goes to the JSON reader, whose error names the line.
  if (DetectTopologyFormat(data) == TopologyFormat::kUnknown && ToLower(path.extension().string()) == ".json") {
    return LoadJson(data, path.string());
  }
  return ImportTopologyText(data, path.string());
}

}  // namespace commkit::topology
