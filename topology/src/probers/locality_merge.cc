// hwloc facts without hwloc.h: the status JSON, NUMA/package/PCI locality from hwloc XML, and the
// merge of hwloc's view into a probed report (so captures replay on builds without hwloc).
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>
#include <pugixml.hpp>

#include "probers/optional_library.h"
#include "probers/probe_steps.h"

#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "commkit/common/text.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/import.h"
#include "import/xml_load.h"

namespace commkit::topology {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 128;
constexpr std::size_t kMaxWords = 4096;  // 131072 bits: far above any machine

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "0x00000003,0x0" as the NCCL/sysfs cpumap style "00000003,00000000".
std::string MaskFromBitmap(std::string_view bitmap) {
  std::vector<std::string> words;
  for (auto& w : Split(bitmap, ',', true)) {
    std::string_view v = w;
    if (StartsWith(v, "0x") || StartsWith(v, "0X")) v.remove_prefix(2);
    if (v.empty() || v.size() > 8) return "";
    words.push_back(std::string(8 - v.size(), '0') + ToLower(v));
  }
  return Join(words, ",");
}

class LocalityReader {
 public:
  LocalityReader(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  Result<HwlocLocality> Run() {
    pugi::xml_document doc;
    COMMKIT_RETURN_IF_ERROR(internal::LoadXml(doc, text_, origin_));
    pugi::xml_node root = doc.child("topology");
    if (!root) return Status::DataLoss(StrCat(origin_, ": no <topology> element; not an hwloc XML"));
    for (pugi::xml_node o : root.children("object")) COMMKIT_RETURN_IF_ERROR(Walk(o, Context{}, 0));
    std::sort(out_.numa.begin(), out_.numa.end(), [](const HwlocNuma& a, const HwlocNuma& b) { return a.os_index < b.os_index; });
    return std::move(out_);
  }

 private:
  struct Context {
    std::string cpuset, nodeset;
    int package = -1;
    int numa_ancestor = -1;  // v1: a NUMANode above (when no nodeset attributes)
  };

  Status Walk(pugi::xml_node o, Context ctx, int depth) {
    if (depth > kMaxDepth) return Status::DataLoss(StrCat(origin_, ":", LineOfOffset(text_, o.offset_debug()), ": objects nested deeper than 128 levels"));
    const std::string_view type = o.attribute("type").as_string();
    if (auto a = o.attribute("cpuset")) ctx.cpuset = a.as_string();
    if (auto a = o.attribute("nodeset")) ctx.nodeset = a.as_string();
    if (type == "Machine" || type == "System") {
      for (pugi::xml_node info : o.children("info"))
        if (std::string_view(info.attribute("name").as_string()) == "hwlocVersion") out_.version = info.attribute("value").as_string();
    } else if (type == "Package" || type == "Socket") {
      ++out_.packages;
      ctx.package = o.attribute("os_index").as_int(-1);
    } else if (type == "NUMANode") {
      HwlocNuma n;
      n.os_index = o.attribute("os_index").as_int(-1);
      n.package = ctx.package;
      n.cpuset = o.attribute("cpuset").as_string();
      n.cpulist = IndexesToList(HwlocBitmapIndexes(n.cpuset));
      n.memory_bytes = o.attribute("local_memory").as_ullong(0);
      if (n.package < 0) {  // v1: the NUMANode holds its Socket
        int sockets = 0, last = -1;
        for (pugi::xml_node c : o.children("object")) {
          const std::string_view ct = c.attribute("type").as_string();
          if (ct == "Package" || ct == "Socket") ++sockets, last = c.attribute("os_index").as_int(-1);
        }
        if (sockets == 1) n.package = last;
      }
      if (!o.attribute("nodeset")) ctx.nodeset.clear();  // old v1: the ancestor NUMANode decides
      if (n.os_index >= 0 && std::none_of(out_.numa.begin(), out_.numa.end(), [&](const HwlocNuma& x) { return x.os_index == n.os_index; }))
        out_.numa.push_back(n);
      ctx.numa_ancestor = n.os_index;
    } else if (type == "PCIDev") {
      HwlocPciLocality p;
      p.bus_id = CanonicalBusId(o.attribute("pci_busid").as_string());
      if (!ctx.nodeset.empty()) p.numa = HwlocBitmapIndexes(ctx.nodeset, 4096);
      else if (ctx.numa_ancestor >= 0) p.numa = {ctx.numa_ancestor};
      p.cpulist = IndexesToList(HwlocBitmapIndexes(ctx.cpuset));
      if (!p.bus_id.empty()) out_.pci.push_back(std::move(p));
    }
    for (pugi::xml_node c : o.children("object")) COMMKIT_RETURN_IF_ERROR(Walk(c, ctx, depth + 1));
    return Status::Ok();
  }

  std::string_view text_;
  std::string_view origin_;
  HwlocLocality out_;
};

// Merges an imported hwloc Topology and locality into a probed report.
class Merger {
 public:
  Merger(const Topology& imported, const HwlocLocality& loc, ProbeReport& report)
      : imp_(imported), loc_(loc), r_(report), topo_(report.topology) {}

  HwlocMergeStats Run() {
    for (const Node& n : topo_.nodes())
      if (!n.pci.bus_id.empty()) by_bus_.emplace(CanonicalBusId(n.pci.bus_id), n.id);
    stats_.numa_nodes = static_cast<int>(loc_.numa.size());
    if (loc_.packages > 0) r_.system.packages = loc_.packages;
    MergeNuma();
    MergeDevices();
    MergeLocality();
    return stats_;
  }

 private:
  void Note(std::string text) { topo_.metadata().notes.push_back(StrCat("hwloc: ", text)); }

  NodeId FirstCpu() const {
    auto cpus = topo_.Cpus();
    return cpus.empty() ? kNoNode : cpus.front();
  }

  void MergeNuma() {
    for (const HwlocNuma& n : loc_.numa) {
      auto it = std::find_if(r_.numa.begin(), r_.numa.end(), [&](const NumaNodeInfo& x) { return x.os_index == n.os_index; });
      if (it == r_.numa.end()) {
        r_.numa.push_back({n.os_index, n.package, n.cpulist, n.memory_bytes, "hwloc"});
        ++stats_.numa_filled;
      } else {
        bool added = false;
        if (it->memory_bytes == 0 && n.memory_bytes) it->memory_bytes = n.memory_bytes, added = true;
        if (it->cpulist.empty() && !n.cpulist.empty()) it->cpulist = n.cpulist, added = true;
        if (it->package < 0 && n.package >= 0) it->package = n.package, added = true;
        if (added) ++stats_.numa_filled;
        if (it->source == "sysfs") it->source = "sysfs+hwloc";
      }
      std::optional<NodeId> cpu = topo_.FindCpuByNuma(n.os_index);
      if (!cpu) {
        // The sysfs walker's placeholder (no /sys/devices/system/node) takes the first NUMA node.
        for (NodeId c : topo_.Cpus())
          if (topo_.node(c).cpu.numa_id < 0) {
            cpu = c;
            break;
          }
        if (cpu) {
          topo_.node(*cpu).cpu.numa_id = n.os_index;
          topo_.node(*cpu).label = StrCat("CPU", n.os_index);
        } else {
          Node c;
          c.kind = NodeKind::kCpu;
          c.cpu.numa_id = n.os_index;
          c.cpu.vendor = r_.system.cpu_vendor;
          c.label = StrCat("CPU", n.os_index);
          cpu = topo_.AddNode(std::move(c));
        }
        Note(StrCat("NUMA node ", n.os_index, " (CPUs ", n.cpulist.empty() ? "?" : n.cpulist, ") not in sysfs"));
      }
      Node& c = topo_.node(*cpu);
      if (c.cpu.affinity_list.empty()) c.cpu.affinity_list = n.cpulist;
      if (c.cpu.affinity_mask.empty()) c.cpu.affinity_mask = MaskFromBitmap(n.cpuset);
    }
    std::sort(r_.numa.begin(), r_.numa.end(), [](const NumaNodeInfo& a, const NumaNodeInfo& b) { return a.os_index < b.os_index; });
  }

  static bool Endpoint(NodeKind k) { return k == NodeKind::kGpu || k == NodeKind::kNic || k == NodeKind::kNvSwitch; }

  void MergeDevices() {
    for (const Node& in : imp_.nodes()) {
      if (!Endpoint(in.kind) || in.pci.bus_id.empty()) continue;
      if (auto id = FindBus(in.pci.bus_id)) {
        AddNames(in, topo_.node(*id));
        continue;
      }
      const NodeId id = Graft(in.id);
      Note(StrCat(ToString(in.kind), " ", topo_.node(id).label, " at ", topo_.node(id).pci.bus_id, " not in sysfs"));
    }
  }

  void AddNames(const Node& in, Node& n) {
    if (in.kind != n.kind) return;
    if (n.kind == NodeKind::kNic) {
      for (const auto& d : in.nic.netdevs) {
        if (std::find(n.nic.netdevs.begin(), n.nic.netdevs.end(), d) != n.nic.netdevs.end()) continue;
        n.nic.netdevs.push_back(d);
        ++stats_.names_added;
      }
      const bool named = !n.nic.name.empty() && CanonicalBusId(n.nic.name) != n.pci.bus_id;
      if (!named && !in.nic.name.empty() && CanonicalBusId(in.nic.name) != n.pci.bus_id) {
        n.nic.name = in.nic.name;
        n.label = in.nic.name;
        ++stats_.names_added;
      }
    } else if (n.kind == NodeKind::kGpu) {
      if (n.gpu.name.empty() && !in.gpu.name.empty()) n.gpu.name = in.gpu.name, ++stats_.names_added;
      if (n.gpu.uuid.empty() && !in.gpu.uuid.empty()) n.gpu.uuid = in.gpu.uuid, ++stats_.names_added;
      if (n.gpu.cuda_index < 0 && in.gpu.cuda_index >= 0) n.gpu.cuda_index = in.gpu.cuda_index;
    }
  }

  // Copies an imported node (and the bridges/CPU above it that the probed topology lacks).
  NodeId Graft(NodeId iid) {
    if (auto it = grafted_.find(iid); it != grafted_.end()) return it->second;
    const Node& in = imp_.node(iid);
    NodeId out = kNoNode;
    if (in.kind == NodeKind::kCpu) {
      auto cpu = in.cpu.numa_id >= 0 ? topo_.FindCpuByNuma(in.cpu.numa_id) : std::nullopt;
      out = cpu ? *cpu : FirstCpu();
      if (out == kNoNode) {
        Node c;
        c.kind = NodeKind::kCpu;
        c.cpu = in.cpu;
        c.label = in.cpu.numa_id >= 0 ? StrCat("CPU", in.cpu.numa_id) : "CPU";
        out = topo_.AddNode(std::move(c));
      }
    } else if (auto existing = FindBus(in.pci.bus_id)) {
      out = *existing;
    } else if (auto bridge = in.kind == NodeKind::kHostBridge ? SysfsHostBridge(in.label) : std::nullopt) {
      out = *bridge;
    } else {
      Node n = in;
      n.parent = in.parent == kNoNode ? kNoNode : Graft(in.parent);
      n.pci.bus_id = CanonicalBusId(in.pci.bus_id);
      if (n.kind == NodeKind::kGpu) {
        int next = 0;
        for (NodeId g : topo_.Gpus()) next = std::max(next, topo_.node(g).gpu.index + 1);
        n.gpu.index = next;
        n.label = StrCat("GPU", next);
      }
      out = topo_.AddNode(std::move(n));
      if (!topo_.node(out).pci.bus_id.empty()) by_bus_.emplace(topo_.node(out).pci.bus_id, out);
      ++stats_.nodes_added;
    }
    grafted_[iid] = out;
    return out;
  }

  // The sysfs walker's host bridge ("pci0000:80") for an imported one ("HostBridge 0000:[80-8f]").
  std::optional<NodeId> SysfsHostBridge(std::string_view label) const {
    constexpr std::string_view kPrefix = "HostBridge ";
    if (!StartsWith(label, kPrefix)) return std::nullopt;
    const std::string_view range = label.substr(kPrefix.size());  // "0000:[80-8f]"
    const auto open = range.find(":[");
    if (open == std::string_view::npos || range.size() < open + 4) return std::nullopt;
    const std::string want = ToLower(StrCat("pci", range.substr(0, open), ":", range.substr(open + 2, 2)));
    for (NodeId id : topo_.NodesOfKind(NodeKind::kHostBridge))
      if (topo_.node(id).label == want) return id;
    return std::nullopt;
  }

  std::optional<NodeId> FindBus(std::string_view bus_id) const {
    if (bus_id.empty()) return std::nullopt;
    auto it = by_bus_.find(CanonicalBusId(bus_id));
    if (it == by_bus_.end()) return std::nullopt;
    return it->second;
  }

  // Index into r_.locality of a device's entry (created unknown when missing).
  std::size_t LocalityEntry(const Node& n) {
    const std::string bus = CanonicalBusId(n.pci.bus_id);
    if (auto it = locality_index_.find(bus); it != locality_index_.end()) return it->second;
    r_.locality.push_back({bus, n.label, -1, "", ""});
    locality_index_.emplace(bus, r_.locality.size() - 1);
    return r_.locality.size() - 1;
  }

  // The node right below the CPU on the way up from `id` (a host bridge, or the device itself).
  NodeId TopBelowCpu(NodeId id) const {
    NodeId cur = id;
    for (NodeId a : topo_.Ancestors(id)) {
      if (topo_.node(a).kind == NodeKind::kCpu) break;
      cur = a;
    }
    return cur;
  }

  void MergeLocality() {
    for (std::size_t i = 0; i < r_.locality.size(); ++i) locality_index_.emplace(CanonicalBusId(r_.locality[i].bus_id), i);
    // Every endpoint gets an entry (sysfs made most; grafted or NVML-only ones start unknown).
    for (const Node& n : topo_.nodes())
      if (Endpoint(n.kind) && !n.pci.bus_id.empty()) LocalityEntry(n);
    // Host bridges (tops) placed by a device whose NUMA node sysfs knew.
    std::set<NodeId> pinned;
    for (const auto& l : r_.locality)
      if (l.source == "sysfs")
        if (auto id = FindBus(l.bus_id)) pinned.insert(TopBelowCpu(*id));
    std::map<NodeId, int> moved;  // top node -> NUMA node it was moved under
    for (const HwlocPciLocality& p : loc_.pci) {
      auto id = FindBus(p.bus_id);
      if (!id || !Endpoint(topo_.node(*id).kind)) continue;
      DeviceLocality& l = r_.locality[LocalityEntry(topo_.node(*id))];
      if (p.numa.size() != 1) continue;  // attached to the whole machine: hwloc does not know either
      const int numa = p.numa.front();
      if (l.numa_id >= 0) {
        if (l.numa_id != numa)
          Note(StrCat(l.bus_id, ": sysfs says NUMA node ", l.numa_id, ", hwloc says ", numa, "; keeping sysfs"));
        continue;
      }
      l.numa_id = numa;
      if (l.cpulist.empty()) l.cpulist = p.cpulist;
      l.source = "hwloc";
      ++stats_.devices_localized;
      Note(StrCat("NUMA node ", numa, " of ", l.bus_id, " from hwloc (sysfs numa_node -1)"));
      // Move the device's host bridge under that NUMA node's CPU unless a device below it has a
      // NUMA node from sysfs (which placed it) or hwloc disagrees between devices below it.
      auto cpu = topo_.FindCpuByNuma(numa);
      if (!cpu) continue;
      const NodeId top = TopBelowCpu(*id);
      if (auto m = moved.find(top); m != moved.end()) {
        if (m->second != numa) Note(StrCat("devices below ", topo_.node(top).label, " are on different NUMA nodes"));
        continue;
      }
      if (pinned.count(top) || topo_.node(top).parent == *cpu) {
        moved[top] = numa;
        continue;
      }
      topo_.node(top).parent = *cpu;
      moved[top] = numa;
    }
  }

  const Topology& imp_;
  const HwlocLocality& loc_;
  ProbeReport& r_;
  Topology& topo_;
  HwlocMergeStats stats_;
  std::map<NodeId, NodeId> grafted_;
  std::map<std::string, NodeId> by_bus_;               // canonical bus id -> probed node
  std::map<std::string, std::size_t> locality_index_;  // canonical bus id -> r_.locality index
};

}  // namespace

std::vector<int> HwlocBitmapIndexes(std::string_view bitmap, int limit) {
  std::vector<int> out;
  auto words = Split(Trim(bitmap), ',', true);
  if (words.empty() || words.size() > kMaxWords) return out;
  const int n = static_cast<int>(words.size());
  bool infinite = false;
  std::vector<std::uint32_t> values;
  for (int i = 0; i < n; ++i) {
    std::string_view w = Trim(words[i]);
    if (StartsWith(w, "0x") || StartsWith(w, "0X")) w.remove_prefix(2);
    if (i == 0 && w == "f...f") {
      infinite = true;
      continue;
    }
    if (w.empty() || w.size() > 8) return {};
    std::uint32_t v = 0;
    for (char c : w) {
      const int d = HexDigit(c);
      if (d < 0) return {};
      v = v << 4 | static_cast<std::uint32_t>(d);
    }
    values.push_back(v);
  }
  // values.back() holds bits 0..31.
  const int count = static_cast<int>(values.size());
  for (int k = 0; k < count && static_cast<int>(out.size()) < limit; ++k) {
    const std::uint32_t v = values[static_cast<std::size_t>(count - 1 - k)];
    for (int b = 0; b < 32 && static_cast<int>(out.size()) < limit; ++b)
      if (v >> b & 1u) out.push_back(k * 32 + b);
  }
  if (infinite)
    for (int bit = count * 32; static_cast<int>(out.size()) < limit && bit < limit; ++bit) out.push_back(bit);
  return out;
}

std::string IndexesToList(const std::vector<int>& idx) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    parts.push_back(i == j ? StrCat(idx[i]) : StrCat(idx[i], "-", idx[j]));
    i = j + 1;
  }
  return Join(parts, ",");
}

std::string HwlocStatusToJson(const HwlocSnapshot& s) {
  return json{{"available", s.available}, {"version", s.version}, {"error", s.error}}.dump();
}

Status ParseHwlocStatus(std::string_view text, HwlocSnapshot& out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("hwloc fact: not a JSON object (corrupt capture? re-capture with commkit-topo capture)");
  try {
    out.available = j.value("available", false);
    out.version = j.value("version", std::string());
    out.error = j.value("error", std::string());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(StrCat("hwloc fact: malformed (", e.what(), ")"));
  }
  return Status::Ok();
}

Result<HwlocLocality> ReadHwlocLocality(std::string_view xml, std::string_view origin) {
  if (xml.size() > (64u << 20)) return Status::InvalidArgument(StrCat(origin, ": larger than 64 MiB"));
  return LocalityReader(xml, origin).Run();
}

Result<HwlocMergeStats> MergeHwloc(std::string_view xml, ProbeReport& report, std::string_view origin) {
  COMMKIT_ASSIGN_OR_RETURN(HwlocLocality loc, ReadHwlocLocality(xml, origin));
  COMMKIT_ASSIGN_OR_RETURN(Topology imported, ImportHwlocXml(xml, origin));
  if (!loc.version.empty()) report.system.hwloc_version = loc.version;
  return Merger(imported, loc, report).Run();
}

// hwloc's view: live, the snapshot is taken once and recorded as the facts "hwloc" (status) and
// "hwloc.xml"; replay reads both. Never fails the probe: problems become the prober's status.
void ProbeHwlocFacts(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
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
    ctx.AddStatus("hwloc", FactState(status_fact.status()), FactDetail(status_fact.status()));
    return;
  }
  if (Status s = ParseHwlocStatus(*status_fact, st); !s.ok()) {
    ctx.AddStatus("hwloc", ProberState::kFailed, s.ToString());
    return;
  }
  if (!st.available) {
    // A build choice, or a node without libhwloc: not a problem with this machine.
    if (StartsWith(st.error, "commkit was built without hwloc") || IsLibraryUnavailable(kLibhwloc, st.error))
      r.probers.push_back({"hwloc", ProberState::kSkipped, StrCat("skipped: ", st.error)});
    else
      ctx.AddStatus("hwloc", ProberState::kFailed, StrCat("hwloc ", st.version, ": ", st.error));
    return;
  }
  auto xml = view.Fact("hwloc.xml", [&] { return Result<std::string>(snapshot().xml); });
  if (!xml.ok()) {
    ctx.AddStatus("hwloc", ProberState::kFailed, StrCat("hwloc.xml: ", xml.status().message()));
    return;
  }
  r.system.hwloc_version = st.version;
  auto merged = MergeHwloc(*xml, r, view.live() ? "hwloc live export" : (view.root() / ".commkit/facts/hwloc.xml").string());
  if (!merged.ok()) {
    ctx.AddStatus("hwloc", ProberState::kFailed, merged.status().ToString());
    return;
  }
  const HwlocMergeStats& m = *merged;
  ctx.AddStatus("hwloc", ProberState::kOk,
                StrCat("hwloc ", r.system.hwloc_version, ": ", m.numa_nodes, " NUMA node(s), ", r.system.packages,
                       " package(s); ", m.devices_localized, " device(s) placed on a NUMA node sysfs did not give, ",
                       m.nodes_added, " node(s) and ", m.names_added, " name(s) sysfs lacked"));
}

#if !COMMKIT_HAVE_HWLOC
HwlocSnapshot HwlocSnapshotLive() {
  HwlocSnapshot s;
  s.error = "commkit was built without hwloc (install libhwloc-dev and reconfigure)";
  return s;
}
#endif

}  // namespace commkit::topology
