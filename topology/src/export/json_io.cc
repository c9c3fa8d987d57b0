// Topology JSON export and load (schema documented in docs/topology-json.md).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"
#include "commkit/topology/json.h"
#include "commkit/topology/path.h"

namespace commkit::topology {
namespace {

using nlohmann::json;

constexpr NodeKind kNodeKinds[] = {NodeKind::kCpu, NodeKind::kPciSwitch, NodeKind::kHostBridge, NodeKind::kGpu,
                                   NodeKind::kNvSwitch, NodeKind::kNic, NodeKind::kOtherPci};
constexpr LinkKind kLinkKinds[] = {LinkKind::kPcie, LinkKind::kNvLink, LinkKind::kC2C, LinkKind::kSmp,
                                   LinkKind::kNetwork};
constexpr TopologySource kSources[] = {TopologySource::kUnknown, TopologySource::kProbed, TopologySource::kNcclXml,
                                       TopologySource::kHwlocXml, TopologySource::kNvsmi, TopologySource::kJson};

template <typename E, std::size_t N>
bool FromName(const E (&all)[N], std::string_view name, E& out) {
  for (E e : all) {
    if (ToString(e) == name) {
      out = e;
      return true;
    }
  }
  return false;
}

json PciJson(const PciInfo& p) {
  return json{{"bus_id", p.bus_id}, {"class", p.class_code}, {"vendor", p.vendor_id}, {"device", p.device_id},
              {"subsystem_vendor", p.subsystem_vendor_id}, {"subsystem_device", p.subsystem_device_id},
              {"link", {{"gen", p.link.gen}, {"width", p.link.width}, {"max_gen", p.link.max_gen},
                        {"max_width", p.link.max_width}}}};
}

json NodeJson(const Node& n) {
  json j{{"id", n.id}, {"kind", ToString(n.kind)}, {"parent", n.parent}, {"label", n.label}};
  if (n.kind == NodeKind::kCpu) {
    j["cpu"] = {{"numa_id", n.cpu.numa_id}, {"affinity_mask", n.cpu.affinity_mask},
                {"affinity_list", n.cpu.affinity_list}, {"arch", n.cpu.arch}, {"vendor", n.cpu.vendor},
                {"family_id", n.cpu.family_id}, {"model_id", n.cpu.model_id}};
  } else {
    j["pci"] = PciJson(n.pci);
  }
  if (n.kind == NodeKind::kGpu) {
    const GpuInfo& g = n.gpu;
    j["gpu"] = {{"index", g.index}, {"cuda_index", g.cuda_index}, {"nvml_index", g.nvml_index}, {"rank", g.rank},
                {"name", g.name}, {"uuid", g.uuid}, {"sm", g.sm}, {"memory_bytes", g.memory_bytes},
                {"gdr", g.gdr ? json(*g.gdr) : json(nullptr)}};
  }
  if (n.kind == NodeKind::kNic) {
    const NicInfo& c = n.nic;
    json ports = json::array();
    for (const auto& p : c.ports) {
      ports.push_back({{"port", p.port}, {"state", p.state}, {"phys_state", p.phys_state},
                       {"link_layer", p.link_layer}, {"speed_gbps", p.speed_gbps}, {"guid", p.guid},
                       {"mtu", p.mtu}, {"gids", p.gids}});
    }
    j["nic"] = {{"kind", ToString(c.kind)}, {"name", c.name}, {"dev", c.dev}, {"ports", ports},
                {"netdevs", c.netdevs}, {"gdr", c.gdr ? json(*c.gdr) : json(nullptr)},
                {"max_conn", c.max_conn}, {"guid", c.guid}};
  }
  return j;
}

// Typed field access; throws json exceptions on type mismatch (caught by LoadJson).
template <typename T>
void Get(const json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = it->get<T>();
}

}  // namespace

std::string ExportJson(const Topology& t, const JsonExportOptions& options) {
  json root;
  root["schema"] = "commkit.topology";
  root["version"] = kTopologyJsonVersion;
  const TopologyMetadata& m = t.metadata();
  root["metadata"] = {{"source", ToString(m.source)}, {"source_path", m.source_path}, {"hostname", m.hostname},
                      {"format_version", m.format_version}, {"notes", m.notes}};
  json nodes = json::array();
  for (const Node& n : t.nodes()) nodes.push_back(NodeJson(n));
  root["nodes"] = std::move(nodes);
  json links = json::array();
  for (const Link& l : t.links()) {
    links.push_back({{"kind", ToString(l.kind)}, {"a", l.a}, {"b", l.b}, {"count", l.count},
                     {"nvlink_version", l.nvlink_version}, {"bandwidth_gbps", l.bandwidth_gbps},
                     {"target_class", l.target_class}});
  }
  root["links"] = std::move(links);
  json po = json::array(), pp = json::array(), aff = json::array();
  for (const auto& o : t.path_overrides()) po.push_back({{"a", o.a}, {"b", o.b}, {"type", o.type}});
  for (const auto& o : t.p2p_overrides()) {
    pp.push_back({{"a", o.a}, {"b", o.b}, {"mode", std::string(1, o.mode)}, {"status", o.status}});
  }
  for (const auto& a : t.gpu_affinities()) {
    aff.push_back({{"gpu", a.gpu}, {"cpu_affinity", a.cpu_affinity}, {"numa_affinity", a.numa_affinity},
                   {"gpu_numa_id", a.gpu_numa_id}});
  }
  root["path_overrides"] = std::move(po);
  root["p2p_overrides"] = std::move(pp);
  root["gpu_affinities"] = std::move(aff);
  if (options.include_paths) {
    const PathMatrix pm = ComputePaths(t);
    json paths = {{"endpoints", pm.endpoints()}, {"labels", pm.labels()}};
    json cells = json::array();
    for (std::size_t i = 0; i < pm.size(); ++i) {
      json row = json::array();
      for (std::size_t j = 0; j < pm.size(); ++j) {
        const PathInfo& p = pm.at(i, j);
        row.push_back({{"type", p.Label()}, {"bandwidth_gbps", p.bandwidth_gbps}, {"p2p", p.p2p},
                       {"p2p_explicit", p.p2p_explicit}, {"gdr", p.gdr}});
      }
      cells.push_back(std::move(row));
    }
    paths["cells"] = std::move(cells);
    root["paths"] = std::move(paths);
  }
  return root.dump(options.indent);
}

Result<Topology> LoadJson(std::string_view text, std::string_view origin) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    const std::size_t end = std::min<std::size_t>(e.byte, text.size());
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
    return Status::DataLoss(StrCat(origin, ":", line, ": malformed JSON (", e.what(), ")"));
  }
  try {
    if (root.is_object() && !root.contains("schema") && root.contains("probers") && root.contains("gpus")) {
      return Status::DataLoss(StrCat(origin, ": this is a `commkit-topo show --json` report, not a commkit topology JSON; "
                                     "write one with `commkit-topo export --format json`"));
    }
    if (!root.is_object() || root.value("schema", std::string()) != "commkit.topology") {
      return Status::DataLoss(StrCat(origin, ": not a commkit topology JSON (schema must be \"commkit.topology\")"));
    }
    const int version = root.value("version", 0);
    if (version != kTopologyJsonVersion) {
      return Status::NotSupported(StrCat(origin, ": topology JSON version ", version, "; this commkit reads version ",
                                         kTopologyJsonVersion));
    }
    Topology t;
    if (auto it = root.find("metadata"); it != root.end() && it->is_object()) {
      TopologyMetadata& m = t.metadata();
      std::string source;
      Get(*it, "source", source);
      if (!source.empty() && !FromName(kSources, source, m.source)) {
        return Status::DataLoss(StrCat(origin, ": unknown metadata.source '", source, "'"));
      }
      Get(*it, "source_path", m.source_path);
      Get(*it, "hostname", m.hostname);
      Get(*it, "format_version", m.format_version);
      Get(*it, "notes", m.notes);
    }
    const json& nodes = root.at("nodes");
    if (!nodes.is_array()) return Status::DataLoss(StrCat(origin, ": \"nodes\" must be an array"));
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const json& j = nodes[i];
      Node n;
      const std::string kind = j.at("kind").get<std::string>();
      if (!FromName(kNodeKinds, kind, n.kind)) {
        return Status::DataLoss(StrCat(origin, ": nodes[", i, "]: unknown kind '", kind, "'"));
      }
      if (j.value("id", static_cast<NodeId>(i)) != static_cast<NodeId>(i)) {
        return Status::DataLoss(StrCat(origin, ": nodes[", i, "] has id ", j.value("id", -1), "; ids must be 0..n-1 in order"));
      }
      Get(j, "parent", n.parent);
      Get(j, "label", n.label);
      if (auto c = j.find("cpu"); c != j.end()) {
        Get(*c, "numa_id", n.cpu.numa_id);
        Get(*c, "affinity_mask", n.cpu.affinity_mask);
        Get(*c, "affinity_list", n.cpu.affinity_list);
        Get(*c, "arch", n.cpu.arch);
        Get(*c, "vendor", n.cpu.vendor);
        Get(*c, "family_id", n.cpu.family_id);
        Get(*c, "model_id", n.cpu.model_id);
      }
      if (auto p = j.find("pci"); p != j.end()) {
        Get(*p, "bus_id", n.pci.bus_id);
        Get(*p, "class", n.pci.class_code);
        Get(*p, "vendor", n.pci.vendor_id);
        Get(*p, "device", n.pci.device_id);
        Get(*p, "subsystem_vendor", n.pci.subsystem_vendor_id);
        Get(*p, "subsystem_device", n.pci.subsystem_device_id);
        if (auto l = p->find("link"); l != p->end()) {
          Get(*l, "gen", n.pci.link.gen);
          Get(*l, "width", n.pci.link.width);
          Get(*l, "max_gen", n.pci.link.max_gen);
          Get(*l, "max_width", n.pci.link.max_width);
        }
      }
      if (auto g = j.find("gpu"); g != j.end()) {
        Get(*g, "index", n.gpu.index);
        Get(*g, "cuda_index", n.gpu.cuda_index);
        Get(*g, "nvml_index", n.gpu.nvml_index);
        Get(*g, "rank", n.gpu.rank);
        Get(*g, "name", n.gpu.name);
        Get(*g, "uuid", n.gpu.uuid);
        Get(*g, "sm", n.gpu.sm);
        Get(*g, "memory_bytes", n.gpu.memory_bytes);
        if (auto v = g->find("gdr"); v != g->end() && !v->is_null()) n.gpu.gdr = v->get<bool>();
      }
      if (auto c = j.find("nic"); c != j.end()) {
        std::string nk;
        Get(*c, "kind", nk);
        auto parsed = ParseNicKind(nk.empty() ? "unknown" : nk);
        if (!parsed.ok()) return parsed.status().WithContext(StrCat(origin, ": nodes[", i, "]"));
        n.nic.kind = *parsed;
        Get(*c, "name", n.nic.name);
        Get(*c, "dev", n.nic.dev);
        Get(*c, "netdevs", n.nic.netdevs);
        Get(*c, "max_conn", n.nic.max_conn);
        Get(*c, "guid", n.nic.guid);
        if (auto v = c->find("gdr"); v != c->end() && !v->is_null()) n.nic.gdr = v->get<bool>();
        if (auto ps = c->find("ports"); ps != c->end()) {
          for (const json& pj : *ps) {
            NicPort p;
            Get(pj, "port", p.port);
            Get(pj, "state", p.state);
            Get(pj, "phys_state", p.phys_state);
            Get(pj, "link_layer", p.link_layer);
            Get(pj, "speed_gbps", p.speed_gbps);
            Get(pj, "guid", p.guid);
            Get(pj, "mtu", p.mtu);
            Get(pj, "gids", p.gids);
            n.nic.ports.push_back(std::move(p));
          }
        }
      }
      t.AddNode(std::move(n));
    }
    if (auto links = root.find("links"); links != root.end()) {
      for (std::size_t i = 0; i < links->size(); ++i) {
        const json& j = (*links)[i];
        Link l;
        const std::string kind = j.at("kind").get<std::string>();
        if (!FromName(kLinkKinds, kind, l.kind)) {
          return Status::DataLoss(StrCat(origin, ": links[", i, "]: unknown kind '", kind, "'"));
        }
        Get(j, "a", l.a);
        Get(j, "b", l.b);
        Get(j, "count", l.count);
        Get(j, "nvlink_version", l.nvlink_version);
        Get(j, "bandwidth_gbps", l.bandwidth_gbps);
        Get(j, "target_class", l.target_class);
        if (!t.Contains(l.a) || !t.Contains(l.b)) {
          return Status::DataLoss(StrCat(origin, ": links[", i, "] references a missing node"));
        }
        t.AddLink(std::move(l));
      }
    }
    if (auto po = root.find("path_overrides"); po != root.end()) {
      for (const json& j : *po) t.AddPathOverride({j.at("a").get<NodeId>(), j.at("b").get<NodeId>(), j.at("type").get<std::string>()});
    }
    if (auto pp = root.find("p2p_overrides"); pp != root.end()) {
      for (const json& j : *pp) {
        const std::string mode = j.value("mode", std::string("r"));
        if (mode.size() != 1) return Status::DataLoss(StrCat(origin, ": p2p_overrides mode must be one letter"));
        t.AddP2pOverride({j.at("a").get<NodeId>(), j.at("b").get<NodeId>(), mode[0], j.at("status").get<std::string>()});
      }
    }
    if (auto aff = root.find("gpu_affinities"); aff != root.end()) {
      for (const json& j : *aff) {
        GpuAffinity a;
        a.gpu = j.at("gpu").get<NodeId>();
        Get(j, "cpu_affinity", a.cpu_affinity);
        Get(j, "numa_affinity", a.numa_affinity);
        Get(j, "gpu_numa_id", a.gpu_numa_id);
        t.AddGpuAffinity(std::move(a));
      }
    }
    Status valid = t.Validate();
    if (!valid.ok()) return Status::DataLoss(StrCat(origin, ": ", valid.message()));
    return t;
  } catch (const json::exception& e) {
    return Status::DataLoss(StrCat(origin, ": topology JSON has a missing or mistyped field (", e.what(), ")"));
  }
}

}  // namespace commkit::topology
