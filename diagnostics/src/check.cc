#include "commkit/diagnostics/check.h"

#include <exception>
#include <mutex>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commkit/common/check.h"
#include "commkit/topology/probe.h"

namespace commkit::diagnostics {

struct CheckContext::TopologyCache {
  std::once_flag once;
  std::optional<Result<topology::ProbeReport>> report;
};

CheckContext::CheckContext(std::shared_ptr<SystemView> system_view)
    : system(std::move(system_view)), topology_(std::make_shared<TopologyCache>()) {
  COMMKIT_CHECK(system != nullptr, "gpudoctor: CheckContext needs a SystemView");
}

const Result<topology::ProbeReport>& CheckContext::topology() const {
  std::call_once(topology_->once, [this] {
    topology::ProbeOptions options;
    options.nvml = options.cuda = true;  // P2P matrix, GPU names, NVLink/ECC/clock facts when a driver is present
    topology_->report.emplace(topology::ProbeTopology(*system, options));
  });
  return *topology_->report;
}

const char* ToString(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass: return "pass";
    case CheckStatus::kWarn: return "warn";
    case CheckStatus::kFail: return "fail";
    case CheckStatus::kSkip: return "skip";
  }
  return "unknown";
}

void CheckRegistry::Add(Check check) {
  for (const Check& c : checks_)
    COMMKIT_CHECK(c.info.id != check.info.id, "gpudoctor: duplicate check id '", check.info.id, "'");
  checks_.push_back(std::move(check));
}

CheckRegistry CheckRegistry::BuiltIn() {
  CheckRegistry registry;
  RegisterNodeChecks(registry);
  RegisterTopologyChecks(registry);
  RegisterGpuChecks(registry);
  RegisterFabricChecks(registry);
  return registry;
}

namespace {
bool Selected(const std::vector<std::string>& globs, const CheckInfo& info) {
  for (const std::string& g : globs)
    if (GlobMatch(g, info.id) || GlobMatch(g, info.category) || GlobMatch(g + ".*", info.id)) return true;
  return false;
}
}  // namespace

std::vector<const Check*> SelectChecks(const CheckRegistry& registry, const Selection& selection) {
  std::vector<const Check*> out;
  for (const Check& check : registry.checks()) {
    if (!selection.only.empty() && !Selected(selection.only, check.info)) continue;
    if (Selected(selection.skip, check.info)) continue;
    out.push_back(&check);
  }
  return out;
}

Report RunChecks(const CheckRegistry& registry, const CheckContext& context, const Selection& selection) {
  Report report;
  for (const Check* check : SelectChecks(registry, selection)) {
    CheckRecord record{check->info, {}};
    if (context.system) (void)context.system->TakeUnreadableFacts();
    try {
      record.outcome = check->run(context);
    } catch (const std::exception& e) {
      record.outcome = {CheckStatus::kFail, std::string("check crashed: ") + e.what(), {}, ""};
    }
    // A corrupt snapshot fact must not read as an answer: the check is at least a WARN that says
    // so, whatever the damaged value made it conclude (kept as evidence).
    if (std::vector<std::string> bad = context.system ? context.system->TakeUnreadableFacts() : std::vector<std::string>{};
        !bad.empty()) {
      CheckOutcome& o = record.outcome;
      o.evidence.insert(o.evidence.begin(), "result from the unreadable data: " + std::string(ToString(o.status)) + " " + o.summary);
      if (o.status != CheckStatus::kFail) o.status = CheckStatus::kWarn;
      o.summary = "unreadable: " + bad.front() + (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more)" : "");
      for (std::size_t i = 1; i < bad.size(); ++i) o.evidence.push_back(bad[i]);
    }
    report.records.push_back(std::move(record));
  }
  return report;
}

int Report::ExitCode() const {
  int code = 0;
  for (const CheckRecord& r : records) {
    if (r.outcome.status == CheckStatus::kFail) code = 2;
    if (r.outcome.status == CheckStatus::kWarn && code < 1) code = 1;
  }
  return code;
}

std::string Report::ToText(bool color) const {
  auto paint = [&](CheckStatus s) -> std::string {
    std::string tag = ToString(s);
    for (char& c : tag) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!color) return tag;
    const char* code = s == CheckStatus::kPass ? "32" : s == CheckStatus::kWarn ? "33" : s == CheckStatus::kFail ? "31" : "90";
    return std::string("\033[") + code + "m" + tag + "\033[0m";
  };
  int counts[4] = {0, 0, 0, 0};
  for (const CheckRecord& r : records) ++counts[static_cast<int>(r.outcome.status)];
  std::ostringstream out;
  out << "gpudoctor: " << records.size() << " checks: " << counts[0] << " pass, " << counts[1] << " warn, "
      << counts[2] << " fail, " << counts[3] << " skip\n";
  for (CheckStatus s : {CheckStatus::kFail, CheckStatus::kWarn}) {
    for (const CheckRecord& r : records)
      if (r.outcome.status == s) out << "  " << paint(s) << " " << r.info.id << ": " << r.outcome.summary << "\n";
  }
  out << "\nDetails:\n";
  for (const CheckRecord& r : records) {
    out << "[" << paint(r.outcome.status) << "] " << r.info.id << " (" << r.info.category << ") — " << r.info.title
        << "\n    " << r.outcome.summary << "\n";
    for (const std::string& e : r.outcome.evidence) out << "    evidence: " << e << "\n";
    if (!r.outcome.fix.empty()) out << "    fix: " << r.outcome.fix << "\n";
  }
  return out.str();
}

std::string Report::ToJson() const {
  nlohmann::json doc;
  doc["schema"] = "commkit.gpudoctor.report/1";
  doc["exit_code"] = ExitCode();
  nlohmann::json checks = nlohmann::json::array();
  for (const CheckRecord& r : records) {
    checks.push_back({{"id", r.info.id},
                      {"title", r.info.title},
                      {"category", r.info.category},
                      {"result", ToString(r.outcome.status)},
                      {"summary", r.outcome.summary},
                      {"evidence", r.outcome.evidence},
                      {"fix", r.outcome.fix}});
  }
  doc["checks"] = std::move(checks);
  return doc.dump(2) + "\n";
}

}  // namespace commkit::diagnostics
