// Which rank / host / input diverged from the others: stopped at an earlier sequence number, was in a
// different collective, failed first with a real error while the others only saw its absence, used a
// different transport, or ran a different NCCL version.
#include <algorithm>
#include <map>
#include <set>

#include "causes.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics::explain {

namespace {

constexpr std::size_t kMaxDivergences = 64;

// Symptoms that a rank reports because *another* rank failed.
bool IsSymptom(const std::string& l) {
  for (const char* w : {"connection closed", "connection reset", "remote process exited", "watchdog caught",
                        "timeout at nccl work", "timed out", "broken pipe", "heartbeat monitor", "sending process",
                        "closing signal", "socket timeout", "collective operation timeout"})
    if (l.find(w) != std::string::npos) return true;
  return false;
}

struct Unit {
  std::string name;
  std::vector<std::string> versions, transports;
  const Message* first_error = nullptr;
  bool symptom_only = true;
  bool any_error = false;
  bool watchdog = false;
};

}  // namespace

std::vector<Divergence> FindDivergences(const std::vector<Message>& messages, const LogFacts& facts,
                                        const std::vector<std::string>& names) {
  std::vector<Divergence> out;
  // Units: the inputs when there are several; else hosts; else ranks of one interleaved log.
  enum class By { kSource, kHost, kRank } by = By::kSource;
  if (names.size() <= 1) by = facts.hosts.size() > 1 ? By::kHost : By::kRank;
  std::map<std::string, Unit> units;
  std::vector<std::string> order;
  for (const Message& m : messages) {
    std::string key;
    switch (by) {
      case By::kSource: key = names[static_cast<std::size_t>(m.line->source)]; break;
      case By::kHost: key = m.line->host.empty() ? std::string() : "host " + m.line->host; break;
      case By::kRank: key = m.line->rank >= 0 ? "rank " + std::to_string(m.line->rank) : std::string(); break;
    }
    if (key.empty()) continue;
    auto [it, inserted] = units.try_emplace(key);
    Unit& u = it->second;
    if (inserted) {
      u.name = key;
      order.push_back(key);
    }
    std::string_view body = m.line->body;
    if (std::size_t at = body.find("NCCL version "); at != std::string_view::npos) {
      std::size_t end = at + 13;
      while (end < body.size() && (std::isdigit(static_cast<unsigned char>(body[end])) || body[end] == '.')) ++end;
      if (end > at + 13) AddUnique(u.versions, std::string(body.substr(at + 13, end - at - 13)));
    }
    if (std::size_t via = body.find(" via "); via != std::string_view::npos) {
      std::string_view t = body.substr(via + 5);
      if (t.rfind("NET/", 0) == 0) t.remove_prefix(4);
      t = t.substr(0, std::min(t.find('/'), t.find(' ')));
      if (!t.empty()) AddUnique(u.transports, std::string(t));
    }
    if (m.lower.find("watchdog caught") != std::string::npos || m.lower.find("timeout at nccl work") != std::string::npos)
      u.watchdog = true;
    if (LooksLikeError(m) && !IsEnvelopeOrHeader(m)) {
      if (u.first_error == nullptr) u.first_error = &m;
      u.any_error = true;
      if (!IsSymptom(m.lower)) u.symptom_only = false;
    }
  }
  auto ev = [&](const Message* m) {
    std::vector<EvidenceLine> v;
    if (m != nullptr) v.push_back(Evidence(*m, names));
    return v;
  };

  // Progress: per rank (or per input when ranks are not printed).
  std::map<long long, std::vector<const RankProgress*>> by_seq;
  for (const RankProgress& p : facts.progress)
    if (p.seq >= 0) by_seq[p.seq].push_back(&p);
  auto who = [&](const RankProgress& p) {
    std::string s = p.rank >= 0 ? "rank " + std::to_string(p.rank) : std::string("a rank");
    if (!p.source.empty()) s += " (" + p.source + ")";
    return s;
  };
  auto line_of = [&](const RankProgress& p) {
    EvidenceLine e;
    e.line = p.line;
    e.source = names.size() > 1 ? p.source : std::string();
    e.text = p.text;
    return e;
  };
  if (by_seq.size() > 1) {
    long long top = by_seq.rbegin()->first;
    for (auto& [seq, ps] : by_seq) {
      if (seq == top) continue;
      for (const RankProgress* p : ps)
        out.push_back({"stopped_earlier", who(*p),
                       "stopped at SeqNum " + std::to_string(seq) + (p->op.empty() ? "" : " (" + p->op + ")") +
                           " while other ranks reached SeqNum " + std::to_string(top),
                       {line_of(*p)}});
    }
  }
  for (auto& [seq, ps] : by_seq) {
    std::map<std::string, int> ops;
    for (const RankProgress* p : ps)
      if (!p->op.empty()) ++ops[p->op];
    if (ops.size() < 2) continue;
    std::string majority = std::max_element(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    for (const RankProgress* p : ps)
      if (!p->op.empty() && p->op != majority)
        out.push_back({"different_op", who(*p),
                       "was in " + p->op + " at SeqNum " + std::to_string(seq) + " while the others were in " + majority,
                       {line_of(*p)}});
  }
  // Last completed / enqueued work differing.
  if (facts.progress.size() > 1) {
    long long max_done = -1;
    for (const RankProgress& p : facts.progress) max_done = std::max(max_done, p.last_completed);
    for (const RankProgress& p : facts.progress)
      if (p.last_completed >= 0 && p.last_completed < max_done && by_seq.size() <= 1)
        out.push_back({"stopped_earlier", who(p),
                       "last completed work " + std::to_string(p.last_completed) + " while others completed " +
                           std::to_string(max_done),
                       {line_of(p)}});
  }

  if (units.size() > 1) {
    // The unit that failed with a real error while the others only report symptoms of its failure.
    int real = 0, symptom = 0;
    for (auto& [k, u] : units) {
      if (!u.any_error) continue;
      (u.symptom_only ? symptom : real) += 1;
    }
    if (real >= 1 && symptom >= 1 && real < static_cast<int>(units.size()))
      for (const std::string& k : order) {
        const Unit& u = units[k];
        if (u.any_error && !u.symptom_only)
          out.push_back({"died_first", u.name, "has its own error while the other inputs only report lost peers / timeouts",
                         ev(u.first_error)});
      }
    // Units that never reported while others hit the watchdog: the likely stuck or dead ones.
    int watchdogs = 0;
    for (auto& [k, u] : units) watchdogs += u.watchdog;
    if (watchdogs > 0 && by == By::kSource)
      for (const std::string& k : order)
        if (!units[k].watchdog && !units[k].any_error)
          out.push_back({"silent", k, "reported no timeout and no error while other ranks timed out (stuck or killed)", {}});
    // Transports and versions.
    std::map<std::string, std::vector<std::string>> by_transport, by_version;
    for (const std::string& k : order) {
      const Unit& u = units[k];
      std::vector<std::string> t = u.transports;
      t.erase(std::remove_if(t.begin(), t.end(), [](const std::string& x) { return x == "P2P" || x == "SHM"; }), t.end());
      std::sort(t.begin(), t.end());
      if (!t.empty()) by_transport[Join(t, "+")].push_back(k);
      if (!u.versions.empty()) by_version[Join(u.versions, "+")].push_back(k);
    }
    auto minority = [&](std::map<std::string, std::vector<std::string>>& groups, const char* kind, const char* what) {
      if (groups.size() < 2) return;
      auto big = std::max_element(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.second.size() < b.second.size(); });
      for (auto& [val, ks] : groups) {
        if (&val == &big->first) continue;
        for (const std::string& k : ks)
          out.push_back({kind, k, std::string(what) + " " + val + " while the others use " + big->first, {}});
      }
    };
    minority(by_transport, "transport", "uses");
    minority(by_version, "nccl_version", "runs NCCL");
  }
  if (out.size() > kMaxDivergences) out.resize(kMaxDivergences);
  return out;
}

}  // namespace commkit::diagnostics::explain
