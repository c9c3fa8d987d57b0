// libibverbs facts: code -> sysfs spelling conversion, JSON (de)serialization, merge into a
// ProbeReport. No verbs.h here: this file is compiled with or without libibverbs.
#include <nlohmann/json.hpp>

#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "commkit/topology/verbs.h"
#include "probers/probe_steps.h"

namespace commkit::topology {

using json = nlohmann::json;

std::string VerbsPortStateName(int state) {
  switch (state) {
    case 0: return "NOP";
    case 1: return "DOWN";
    case 2: return "INIT";
    case 3: return "ARMED";
    case 4: return "ACTIVE";
    case 5: return "ACTIVE_DEFER";
    default: return StrCat("UNKNOWN(", state, ")");
  }
}

std::string VerbsPhysStateName(int phys_state) {
  switch (phys_state) {
    case 1: return "Sleep";
    case 2: return "Polling";
    case 3: return "Disabled";
    case 4: return "PortConfigurationTraining";
    case 5: return "LinkUp";
    case 6: return "LinkErrorRecovery";
    case 7: return "Phy Test";
    default: return phys_state == 0 ? "" : StrCat("UNKNOWN(", phys_state, ")");
  }
}

std::string VerbsLinkLayerName(int link_layer) { return link_layer == 2 ? "Ethernet" : "InfiniBand"; }

std::string VerbsGidTypeName(int type) { return type == 2 ? "RoCE v2" : "IB/RoCE v1"; }

double VerbsRateGbps(int active_speed, int active_width) {
  double lane = 0;
  switch (active_speed) {
    case 1: lane = 2.5; break;    // SDR
    case 2: lane = 5; break;      // DDR
    case 4: lane = 10; break;     // QDR
    case 8: lane = 10; break;     // FDR10 (10.3125 signalling, 10 data)
    case 16: lane = 14; break;    // FDR
    case 32: lane = 25; break;    // EDR
    case 64: lane = 50; break;    // HDR
    case 128: lane = 100; break;  // NDR
    default: return 0;
  }
  int lanes = 0;
  switch (active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  return lane * lanes;
}

int VerbsMtuBytes(int active_mtu) { return active_mtu >= 1 && active_mtu <= 5 ? 128 << active_mtu : 0; }

NicPort ToNicPort(const VerbsPort& port) {
  NicPort p;
  p.port = port.port;
  p.state = VerbsPortStateName(port.state);
  p.phys_state = VerbsPhysStateName(port.phys_state);
  p.link_layer = VerbsLinkLayerName(port.link_layer);
  p.speed_gbps = VerbsRateGbps(port.active_speed, port.active_width);
  p.mtu = VerbsMtuBytes(port.active_mtu);
  for (const auto& g : port.gids) p.gids.push_back(g.gid);
  return p;
}

std::string VerbsReportToJson(const VerbsReport& report) {
  json j{{"available", report.available}, {"error", report.error}, {"devices", json::array()}};
  for (const auto& d : report.devices) {
    json ports = json::array();
    for (const auto& p : d.ports) {
      json gids = json::array();
      for (const auto& g : p.gids) gids.push_back({{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"ndev", g.ndev}});
      ports.push_back({{"port", p.port}, {"state", p.state}, {"phys_state", p.phys_state}, {"link_layer", p.link_layer},
                       {"active_speed", p.active_speed}, {"active_width", p.active_width}, {"active_mtu", p.active_mtu},
                       {"gids", gids}});
    }
    j["devices"].push_back({{"name", d.name}, {"node_guid", d.node_guid}, {"ports", ports}});
  }
  return j.dump();
}

Result<VerbsReport> ParseVerbsFact(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("verbs fact: not a JSON object (corrupt capture? re-capture with commkit-topo capture)");
  VerbsReport r;
  try {
    r.available = j.value("available", false);
    r.error = j.value("error", std::string());
    if (j.contains("devices")) {
      for (const auto& d : j.at("devices")) {
        VerbsDevice dev;
        dev.name = d.at("name").get<std::string>();
        dev.node_guid = d.value("node_guid", std::string());
        for (const auto& p : d.value("ports", json::array())) {
          VerbsPort port;
          port.port = p.at("port").get<int>();
          port.state = p.value("state", 0);
          port.phys_state = p.value("phys_state", 0);
          port.link_layer = p.value("link_layer", 0);
          port.active_speed = p.value("active_speed", 0);
          port.active_width = p.value("active_width", 0);
          port.active_mtu = p.value("active_mtu", 0);
          for (const auto& g : p.value("gids", json::array()))
            port.gids.push_back({g.at("index").get<int>(), g.at("gid").get<std::string>(), g.value("type", 0),
                                 g.value("ndev", std::string())});
          dev.ports.push_back(std::move(port));
        }
        r.devices.push_back(std::move(dev));
      }
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(StrCat("verbs fact: malformed (", e.what(), ")"));
  }
  return r;
}

int MergeVerbsReport(const VerbsReport& verbs, ProbeReport& report) {
  Topology& topo = report.topology;
  int added = 0;
  for (const auto& dev : verbs.devices) {
    NodeId id = kNoNode;
    for (NodeId n : topo.Nics())
      if (topo.node(n).nic.name == dev.name) id = n;
    if (id == kNoNode) {
      Node n;
      n.kind = NodeKind::kNic;
      n.label = dev.name;
      for (NodeId c = 0; c < static_cast<NodeId>(topo.nodes().size()); ++c)
        if (topo.node(c).kind == NodeKind::kCpu) { n.parent = c; break; }
      n.nic.name = dev.name;
      const bool eth = !dev.ports.empty() && dev.ports[0].link_layer == 2;
      n.nic.kind = StartsWith(dev.name, "efa") ? NicKind::kEfa : eth ? NicKind::kRoCE : NicKind::kInfiniBand;
      id = topo.AddNode(std::move(n));
      ++added;
    }
    NicInfo& nic = topo.node(id).nic;
    if (nic.guid.empty() && !dev.node_guid.empty()) { nic.guid = dev.node_guid; ++added; }
    for (const auto& vp : dev.ports) {
      NicPort from = ToNicPort(vp);
      NicPort* have = nullptr;
      for (auto& p : nic.ports)
        if (p.port == vp.port) have = &p;
      if (!have) {
        nic.ports.push_back(std::move(from));
        ++added;
      } else {
        auto fill = [&](std::string& dst, const std::string& src) {
          if (dst.empty() && !src.empty()) { dst = src; ++added; }
        };
        fill(have->state, from.state);
        fill(have->phys_state, from.phys_state);
        fill(have->link_layer, from.link_layer);
        if (have->speed_gbps <= 0 && from.speed_gbps > 0) { have->speed_gbps = from.speed_gbps; ++added; }
        if (have->mtu <= 0 && from.mtu > 0) { have->mtu = from.mtu; ++added; }
        if (have->gids.empty() && !from.gids.empty()) { have->gids = from.gids; ++added; }
      }
      for (const auto& g : vp.gids) {
        bool known = false;
        for (auto& e : report.gids) {
          if (e.device != dev.name || e.port != vp.port || e.index != g.index) continue;
          known = true;
          if (e.type.empty()) { e.type = VerbsGidTypeName(g.type); ++added; }
          if (e.ndev.empty() && !g.ndev.empty()) { e.ndev = g.ndev; ++added; }
        }
        if (known) continue;
        report.gids.push_back({dev.name, vp.port, g.index, g.gid, VerbsGidTypeName(g.type), g.ndev});
        ++added;
      }
    }
  }
  return added;
}

// libibverbs' port attributes and GID types (fact "verbs"), merged where sysfs was silent.
void ProbeVerbsFact(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  auto fact = view.Fact("verbs", [] { return Result<std::string>(VerbsFact()); });
  if (!fact.ok()) {
    ctx.AddStatus("verbs", FactState(fact.status()), FactDetail(fact.status()));
  } else if (auto v = ParseVerbsFact(*fact); !v.ok()) {
    ctx.AddStatus("verbs", ProberState::kFailed, v.status().ToString());
  } else if (!v->available) {
    ctx.AddStatus("verbs", ProberState::kSkipped, StrCat("skipped: ", v->error));
  } else {
    const int added = MergeVerbsReport(*v, r);
    ctx.AddStatus("verbs", ProberState::kOk,
                  v->devices.empty()
                      ? StrCat("no RDMA devices", v->error.empty() ? "" : " (" + v->error + ")")
                      : StrCat(v->devices.size(), " device(s), ", added, " fact(s) sysfs lacked",
                               v->error.empty() ? "" : "; " + v->error));
  }
}

#if !COMMKIT_HAVE_IBVERBS
std::string VerbsFact() {
  VerbsReport r;
  r.error = "commkit was built without libibverbs (install rdma-core's libibverbs-dev and reconfigure)";
  return VerbsReportToJson(r);
}
#endif

}  // namespace commkit::topology
