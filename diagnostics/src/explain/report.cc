// Text and JSON renderings of an Explanation.
#include <sstream>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics {

namespace {

std::string Where(const EvidenceLine& e) {
  return e.source.empty() ? StrCat("line ", e.line) : StrCat(e.source, ":", e.line);
}

std::string List(const std::vector<std::string>& v, std::string_view sep = ", ") {
  return v.empty() ? std::string("-") : Join(v, std::string(sep));
}

nlohmann::json EvidenceJson(const std::vector<EvidenceLine>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const EvidenceLine& e : v) {
    nlohmann::json j = {{"line", e.line}, {"text", e.text}};
    if (!e.source.empty()) j["source"] = e.source;
    a.push_back(std::move(j));
  }
  return a;
}

// Log text may hold any bytes; JSON output must stay valid UTF-8.
std::string Utf8Safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && n == 1 && c < 0x20 && c != '\t') ok = false;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

nlohmann::json Sanitize(nlohmann::json j) {
  if (j.is_string()) return Utf8Safe(j.get<std::string>());
  if (j.is_array() || j.is_object())
    for (auto& x : j) x = Sanitize(std::move(x));
  return j;
}

}  // namespace

std::string Explanation::ToText() const {
  std::ostringstream out;
  const Diagnosis* best = Best();
  if (best == nullptr) {
    out << "No confident claim: no known failure signature in the log.\n";
  } else {
    out << "Root cause (" << ToString(best->confidence) << " confidence): " << best->signature << ": " << best->cause
        << "\n";
    out << "Fix: " << best->fix << "\n";
    out << "Confirm: " << best->confirm << "\n";
    out << "Basis: " << best->basis << "\n";
    out << "Evidence:\n";
    for (const EvidenceLine& e : best->evidence) out << "  " << Where(e) << ": " << e.text << "\n";
  }
  for (std::size_t i = 1; i < diagnoses.size() && i < 6; ++i) {
    const Diagnosis& d = diagnoses[i];
    out << "Also possible (" << ToString(d.confidence) << "): " << d.signature << ": " << d.cause;
    if (!d.evidence.empty()) out << " [" << Where(d.evidence.front()) << "]";
    out << "\n";
  }
  if (!divergences.empty()) {
    out << "Diverging inputs / ranks:\n";
    for (const Divergence& d : divergences) {
      out << "  " << d.source << ": " << d.detail;
      if (!d.evidence.empty()) out << " [" << Where(d.evidence.front()) << "]";
      out << "\n";
    }
  }
  if (facts.first_error.line != 0) out << "First error: " << Where(facts.first_error) << ": " << facts.first_error.text << "\n";
  out << "NCCL versions: " << List(facts.nccl_versions) << "\n";
  if (!facts.cuda_versions.empty()) out << "CUDA: " << List(facts.cuda_versions) << "\n";
  out << "Hosts: " << List(facts.hosts) << "\n";
  out << "Transports: " << List(facts.transports) << "\n";
  out << "Interfaces: " << List(facts.interfaces) << "\n";
  if (!facts.ib_devices.empty()) out << "IB devices: " << List(facts.ib_devices) << "\n";
  if (!facts.env.empty()) {
    out << "Environment (echoed):";
    for (const auto& [k, v] : facts.env) out << " " << k << "=" << v;
    out << "\n";
  }
  out << "Lines: " << facts.lines << " (" << facts.recognised << " recognised messages)\n";
  return out.str();
}

std::string Explanation::ToJson() const {
  nlohmann::json doc;
  doc["schema"] = "commkit.gpudoctor.explain/2";
  nlohmann::json diags = nlohmann::json::array();
  for (const Diagnosis& d : diagnoses)
    diags.push_back({{"signature", d.signature},
                     {"cause", d.cause},
                     {"fix", d.fix},
                     {"confirm", d.confirm},
                     {"basis", d.basis},
                     {"confidence", ToString(d.confidence)},
                     {"score", d.score},
                     {"evidence", EvidenceJson(d.evidence)}});
  doc["diagnoses"] = diags;
  doc["claim"] = diagnoses.empty() ? "no confident claim" : diagnoses.front().signature;
  doc["confidence"] = diagnoses.empty() ? "none" : ToString(diagnoses.front().confidence);
  nlohmann::json progress = nlohmann::json::array();
  for (const RankProgress& p : facts.progress) {
    nlohmann::json j = {{"rank", p.rank}, {"seq", p.seq}, {"op", p.op}, {"line", p.line}};
    if (p.last_enqueued >= 0) j["last_enqueued"] = p.last_enqueued;
    if (p.last_completed >= 0) j["last_completed"] = p.last_completed;
    if (!p.source.empty()) j["source"] = p.source;
    progress.push_back(std::move(j));
  }
  doc["facts"] = {{"nccl_versions", facts.nccl_versions}, {"cuda_versions", facts.cuda_versions},
                  {"hosts", facts.hosts},                 {"ranks", facts.ranks},
                  {"cuda_devices", facts.cuda_devices},   {"transports", facts.transports},
                  {"interfaces", facts.interfaces},       {"ib_devices", facts.ib_devices},
                  {"link_layers", facts.link_layers},     {"gids", facts.gids},
                  {"errnos", facts.errnos},               {"env", facts.env},
                  {"progress", progress},                 {"lines", facts.lines},
                  {"recognised_messages", facts.recognised}};
  if (facts.first_error.line != 0) doc["facts"]["first_error"] = EvidenceJson({facts.first_error}).front();
  nlohmann::json div = nlohmann::json::array();
  for (const Divergence& d : divergences)
    div.push_back({{"kind", d.kind}, {"source", d.source}, {"detail", d.detail}, {"evidence", EvidenceJson(d.evidence)}});
  doc["divergences"] = div;
  if (!sources.empty()) doc["sources"] = sources;
  // Sanitize() covers values; object keys (the variables a log echoes) can hold invalid UTF-8 too.
  return Sanitize(std::move(doc)).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace commkit::diagnostics
