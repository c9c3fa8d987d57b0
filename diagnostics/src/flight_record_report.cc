// Text and JSON renderings of a FlightVerdict.
#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/flight_record.h"

namespace commkit::diagnostics {

namespace {

std::string Pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string FlightVerdict::ToText() const {
  std::string out;
  for (const FlightGroupVerdict& g : groups) {
    std::size_t present = 0;
    for (const auto& r : g.ranks) present += r.present ? 1 : 0;
    out += StrCat("Flight record of group \"", g.group, "\" (", g.backend.empty() ? "?" : g.backend, ", ", g.world_size,
                  " ranks; dumps from ", present, ")\n");
    out += StrCat("  VERDICT: ", g.findings.empty() ? "OK: " : "", g.headline, "\n");
    for (const FlightFinding& f : g.findings) out += StrCat("  - [", ToString(f.kind), "] ", f.message, "\n");
    out += StrCat("  ", Pad("rank", 6), Pad("host", 18), Pad("last collective", 44), "state\n");
    for (const FlightRankSummary& r : g.ranks) {
      if (!r.present) {
        out += StrCat("  ", Pad(std::to_string(r.rank), 6), Pad("-", 18), Pad("(no dump)", 44), "-\n");
        continue;
      }
      out += StrCat("  ", Pad(std::to_string(r.rank), 6), Pad(r.host.empty() ? "?" : r.host, 18),
                    Pad(r.last_operation.empty() ? "(none recorded)" : r.last_operation, 44), r.last_state, "\n");
      if (!r.pending_p2p.empty()) out += StrCat("        pending send/recv: ", r.pending_p2p, "\n");
    }
    out += "\n";
  }
  for (const std::string& w : warnings) out += StrCat("warning: ", w, "\n");
  return out;
}

std::string FlightVerdict::ToJson() const {
  nlohmann::json doc;
  doc["schema"] = "commkit.flight_verdict/1";
  doc["exit_code"] = ExitCode();
  nlohmann::json gs = nlohmann::json::array();
  for (const FlightGroupVerdict& g : groups) {
    nlohmann::json findings = nlohmann::json::array();
    for (const FlightFinding& f : g.findings)
      findings.push_back({{"kind", ToString(f.kind)},
                          {"ranks", f.ranks},
                          {"others", f.others},
                          {"sequence", f.sequence},
                          {"operation", f.operation},
                          {"message", f.message}});
    nlohmann::json ranks = nlohmann::json::array();
    for (const FlightRankSummary& r : g.ranks) {
      nlohmann::json j = {{"rank", r.rank}, {"present", r.present}};
      if (r.present) {
        j.update({{"host", r.host},
                  {"pid", r.pid},
                  {"source", r.source},
                  {"reason", r.reason},
                  {"last_enqueued", r.last_enqueued},
                  {"last_started", r.last_started},
                  {"last_completed", r.last_completed},
                  {"last_operation", r.last_operation},
                  {"last_state", r.last_state},
                  {"pending_p2p", r.pending_p2p}});
      }
      ranks.push_back(std::move(j));
    }
    gs.push_back({{"group", g.group},
                  {"backend", g.backend},
                  {"world_size", g.world_size},
                  {"verdict", g.findings.empty() ? "ok" : std::string(ToString(g.findings.front().kind))},
                  {"headline", g.headline},
                  {"findings", std::move(findings)},
                  {"ranks", std::move(ranks)}});
  }
  doc["groups"] = std::move(gs);
  doc["warnings"] = warnings;
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace commkit::diagnostics
