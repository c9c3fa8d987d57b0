// Topology JSON export and load (schema documented in docs/topology-json.md).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>

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

// A field of the wrong type or out of range for its C++ type. nlohmann's own get<int>() on a float
// (1e300) or on an unsigned beyond the type's range converts without checking, which is undefined
// behaviour; every field therefore goes through Field() below. Caught by LoadJson.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T Field(const json& v, std::string_view key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw FieldError(StrCat("\"", key, "\" must be true or false, not ", v.type_name()));
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
        throw FieldError(StrCat("\"", key, "\" = ", u, " is out of range"));
      return static_cast<T>(u);
    }
    if (!v.is_number_integer()) throw FieldError(StrCat("\"", key, "\" must be an integer, not ", v.type_name()));
    const auto i = v.get<std::int64_t>();
    if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        (i > 0 && static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())))
      throw FieldError(StrCat("\"", key, "\" = ", i, " is out of range"));
    return static_cast<T>(i);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw FieldError(StrCat("\"", key, "\" must be a number, not ", v.type_name()));
    return v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) throw FieldError(StrCat("\"", key, "\" must be a string, not ", v.type_name()));
    return v.get<std::string>();
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    if (!v.is_array()) throw FieldError(StrCat("\"", key, "\" must be an array of strings, not ", v.type_name()));
    T out;
    for (const json& e : v) out.push_back(Field<std::string>(e, key));
    return out;
  }
}

// Required field of an object.
template <typename T>
T At(const json& j, const char* key) {
  if (!j.is_object()) throw FieldError(StrCat("expected an object holding \"", key, "\", not ", j.type_name()));
  auto it = j.find(key);
  if (it == j.end()) throw FieldError(StrCat("missing \"", key, "\""));
  return Field<T>(*it, key);
}

// Optional field: absent or null leaves `out` as it is.
template <typename T>
void Get(const json& j, const char* key, T& out) {
  if (!j.is_object()) throw FieldError(StrCat("expected an object holding \"", key, "\", not ", j.type_name()));
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = Field<T>(*it, key);
}

template <typename T>
void Get(const json& j, const char* key, std::optional<T>& out) {
  if (!j.is_object()) throw FieldError(StrCat("expected an object holding \"", key, "\", not ", j.type_name()));
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = Field<T>(*it, key);
}

// An array member (absent: empty).
const json& ArrayOf(const json& j, const char* key) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return kEmpty;
  if (!it->is_array()) throw FieldError(StrCat("\"", key, "\" must be an array, not ", it->type_name()));
  return *it;
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
  // Names from a capture may not be UTF-8: replaced (U+FFFD) rather than thrown on.
  return root.dump(options.indent, ' ', false, json::error_handler_t::replace);
}

Result<Topology> LoadJson(std::string_view text, std::string_view origin) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    const std::size_t end = std::min<std::size_t>(e.byte, text.size());
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
    return Status::DataLoss(StrCat(origin, ":", line, ": malformed JSON (", e.what(), ")"));
  } catch (const json::exception& e) {
    // out_of_range.406: a number such as 1e999 that no double holds.
    return Status::DataLoss(StrCat(origin, ": unreadable JSON (", e.what(), ")"));
  }
  try {
    if (root.is_object() && !root.contains("schema") && root.contains("probers") && root.contains("gpus")) {
      return Status::DataLoss(StrCat(origin, ": this is a `commkit-topo show --json` report, not a commkit topology JSON; "
                                     "write one with `commkit-topo export --format json`"));
    }
    if (!root.is_object() || root.value("schema", std::string()) != "commkit.topology") {
      return Status::DataLoss(StrCat(origin, ": not a commkit topology JSON (schema must be \"commkit.topology\")"));
    }
    int version = 0;
    Get(root, "version", version);
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
    if (!root.contains("nodes") || !root.at("nodes").is_array()) return Status::DataLoss(StrCat(origin, ": \"nodes\" must be an array"));
    const json& nodes = root.at("nodes");
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const json& j = nodes[i];
      Node n;
      const std::string kind = At<std::string>(j, "kind");
      if (!FromName(kNodeKinds, kind, n.kind)) {
        return Status::DataLoss(StrCat(origin, ": nodes[", i, "]: unknown kind '", kind, "'"));
      }
      std::int64_t id = static_cast<std::int64_t>(i);
      Get(j, "id", id);
      if (id != static_cast<std::int64_t>(i)) {
        return Status::DataLoss(StrCat(origin, ": nodes[", i, "] has id ", id, "; ids must be 0..n-1 in order"));
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
        Get(*g, "gdr", n.gpu.gdr);
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
        Get(*c, "gdr", n.nic.gdr);
        {
          for (const json& pj : ArrayOf(*c, "ports")) {
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
    {
      const json& links = ArrayOf(root, "links");
      for (std::size_t i = 0; i < links.size(); ++i) {
        const json& j = links[i];
        Link l;
        const std::string kind = At<std::string>(j, "kind");
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
    for (const json& j : ArrayOf(root, "path_overrides"))
      t.AddPathOverride({At<NodeId>(j, "a"), At<NodeId>(j, "b"), At<std::string>(j, "type")});
    for (const json& j : ArrayOf(root, "p2p_overrides")) {
      std::string mode = "r";
      Get(j, "mode", mode);
      if (mode.size() != 1) return Status::DataLoss(StrCat(origin, ": p2p_overrides mode must be one letter"));
      t.AddP2pOverride({At<NodeId>(j, "a"), At<NodeId>(j, "b"), mode[0], At<std::string>(j, "status")});
    }
    {
      for (const json& j : ArrayOf(root, "gpu_affinities")) {
        GpuAffinity a;
        a.gpu = At<NodeId>(j, "gpu");
        Get(j, "cpu_affinity", a.cpu_affinity);
        Get(j, "numa_affinity", a.numa_affinity);
        Get(j, "gpu_numa_id", a.gpu_numa_id);
        t.AddGpuAffinity(std::move(a));
      }
    }
    Status valid = t.Validate();
    if (!valid.ok()) return Status::DataLoss(StrCat(origin, ": ", valid.message()));
    return t;
  } catch (const FieldError& e) {
    return Status::DataLoss(StrCat(origin, ": topology JSON has a missing or mistyped field (", e.what(), ")"));
  } catch (const json::exception& e) {
    return Status::DataLoss(StrCat(origin, ": topology JSON has a missing or mistyped field (", e.what(), ")"));
  }
}

}  // namespace commkit::topology
