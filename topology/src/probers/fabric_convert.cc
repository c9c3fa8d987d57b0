// libfabric facts: JSON (de)serialization and merge into a ProbeReport. No rdma/fabric.h here.
#include <nlohmann/json.hpp>

#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "commkit/topology/libfabric.h"
#include "probers/probe_steps.h"

namespace commkit::topology {

using json = nlohmann::json;

std::string FabricReportToJson(const FabricReport& r) {
  json j{{"available", r.available}, {"version", r.version}, {"provider", r.provider}, {"error", r.error},
         {"domains", json::array()}};
  for (const auto& d : r.domains)
    j["domains"].push_back({{"provider", d.provider}, {"fabric", d.fabric}, {"domain", d.domain}, {"ep_type", d.ep_type},
                            {"bus_id", d.bus_id}});
  return j.dump();
}

Result<FabricReport> ParseLibfabricFact(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("libfabric fact: not a JSON object (corrupt capture? re-capture with commkit-topo capture)");
  FabricReport r;
  try {
    r.available = j.value("available", false);
    r.version = j.value("version", std::string());
    r.provider = j.value("provider", std::string("efa"));
    r.error = j.value("error", std::string());
    for (const auto& d : j.value("domains", json::array()))
      r.domains.push_back({d.value("provider", r.provider), d.value("fabric", std::string()), d.at("domain").get<std::string>(),
                           d.value("ep_type", std::string()), d.value("bus_id", std::string())});
  } catch (const json::exception& e) {
    return Status::InvalidArgument(StrCat("libfabric fact: malformed (", e.what(), ")"));
  }
  return r;
}

std::string FabricDeviceName(const FabricDomain& d) {
  for (const char* suffix : {"-rdm", "-dgrm", "-msg"})
    if (EndsWith(d.domain, suffix)) return d.domain.substr(0, d.domain.size() - std::string_view(suffix).size());
  return d.domain;
}

int MergeFabricReport(const FabricReport& fabric, ProbeReport& report) {
  if (!fabric.available || fabric.domains.empty()) return 0;
  Topology& topo = report.topology;
  int added = 0;
  if (fabric.provider == "efa") report.system.efa_present = true;
  for (const auto& d : fabric.domains) {
    const std::string name = FabricDeviceName(d);
    bool known = topo.FindNic(name).has_value();
    for (NodeId n : topo.Nics())
      if (!d.bus_id.empty() && topo.node(n).pci.bus_id == d.bus_id) known = true;
    if (known) continue;
    Node n;
    n.kind = NodeKind::kNic;
    n.label = name;
    for (NodeId c = 0; c < static_cast<NodeId>(topo.nodes().size()); ++c)
      if (topo.node(c).kind == NodeKind::kCpu) {
        n.parent = c;
        break;
      }
    n.pci.bus_id = d.bus_id;
    n.nic.name = name;
    n.nic.kind = fabric.provider == "efa" ? NicKind::kEfa : NicKind::kUnknown;
    n.nic.gdr = fabric.provider == "efa";
    topo.AddNode(std::move(n));
    ++added;
  }
  return added;
}

// EFA devices as libfabric's efa provider sees them (fact "libfabric").
void ProbeLibfabricFact(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  auto fact = view.Fact("libfabric", [] { return Result<std::string>(LibfabricFact("efa")); });
  if (!fact.ok()) {
    ctx.AddStatus("libfabric", FactState(fact.status()), FactDetail(fact.status()));
  } else if (auto f = ParseLibfabricFact(*fact); !f.ok()) {
    ctx.AddStatus("libfabric", ProberState::kFailed, f.status().ToString());
  } else if (!f->available) {
    // Absence of EFA is the normal case off AWS: a status line, not a warning.
    r.probers.push_back({"libfabric", ProberState::kSkipped, StrCat("skipped: ", f->error)});
  } else {
    const int added = MergeFabricReport(*f, r);
    ctx.AddStatus("libfabric", ProberState::kOk,
                  StrCat("libfabric ", f->version, ", ", f->domains.size(), " ", f->provider, " domain(s), ", added,
                         " NIC(s) sysfs lacked"));
  }
}

#if !COMMKIT_HAVE_LIBFABRIC
std::string LibfabricFact(const std::string& provider) {
  FabricReport r;
  r.provider = provider;
  r.error = "commkit was built without libfabric (install libfabric-dev and reconfigure)";
  return FabricReportToJson(r);
}
#endif

}  // namespace commkit::topology
