// Candidate causes being scored: each family keeps its best score, its confidence, the cause text of the
// strongest hit and up to six evidence lines (the strongest first). Decides when a hit may be `high`.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cause_families.h"
#include "commkit/diagnostics/explain.h"
#include "facts.h"

namespace commkit::diagnostics::explain {

// A candidate this well supported competes with a proof of another family.
inline constexpr int kStrongScore = 70;

inline Confidence ConfidenceFor(int score, bool proven) {
  if (proven && score >= 80) return Confidence::kHigh;
  if (score >= 50) return Confidence::kMedium;
  return Confidence::kLow;
}

class Candidates {
 public:
  explicit Candidates(const std::vector<std::string>& names) : names_(names) {}

  // Adds (or strengthens) a candidate. `proven`: the log alone shows this cause.
  void Hit(std::string_view id, int score, bool proven, std::string cause, const Message* m) {
    // A proof is a line the program reports as a failure: an INFO banner or a line quoted as context
    // (a command, a setting, a hint) shows a condition, not that it broke this run.
    if (proven && m != nullptr && (m->line->nccl_info || !LooksLikeError(*m))) proven = false;
    // A line that lists possible causes ("There are some potential root causes. (1) ... OOM killer")
    // names none of them.
    if (proven && m != nullptr && ListsPossibleCauses(m->lower)) proven = false;
    if (!Provable(id)) proven = false;
    Diagnosis& d = by_id_[std::string(id)];
    Confidence c = ConfidenceFor(score, proven);
    // The line that made the strongest case leads the evidence.
    bool stronger = !d.signature.empty() && score > d.score;
    if (d.signature.empty() || score > d.score || (c > d.confidence)) {
      if (d.signature.empty() || score >= d.score) d.cause = std::move(cause);
      d.score = std::max(d.score, score);
      d.confidence = std::max(d.confidence, c);
      d.signature = std::string(id);
    }
    if (m != nullptr) Add(d, *m, stronger);
  }
  void AddEvidence(std::string_view id, const Message& m) {
    auto it = by_id_.find(std::string(id));
    if (it != by_id_.end()) Add(it->second, m);
  }
  void AddEvidenceLine(std::string_view id, EvidenceLine e) {
    auto it = by_id_.find(std::string(id));
    if (it == by_id_.end() || it->second.evidence.size() >= 6) return;
    it->second.evidence.push_back(std::move(e));
  }
  bool Has(std::string_view id) const { return by_id_.count(std::string(id)) != 0; }
  Diagnosis* Get(std::string_view id) {
    auto it = by_id_.find(std::string(id));
    return it == by_id_.end() ? nullptr : &it->second;
  }

  std::vector<Diagnosis> Take() {
    std::vector<Diagnosis> out;
    for (auto& [id, d] : by_id_) {
      if (const Family* f = FindFamily(id)) {
        d.fix = f->fix;
        d.confirm = f->confirm;
        if (d.basis.empty()) d.basis = f->basis;
      }
      out.push_back(std::move(d));
    }
    std::stable_sort(out.begin(), out.end(), [](const Diagnosis& a, const Diagnosis& b) {
      if (a.confidence != b.confidence) return a.confidence > b.confidence;
      if (a.score != b.score) return a.score > b.score;
      int la = a.evidence.empty() ? 1 << 30 : a.evidence.front().line;
      int lb = b.evidence.empty() ? 1 << 30 : b.evidence.front().line;
      return la < lb;
    });
    return out;
  }

 private:
  void Add(Diagnosis& d, const Message& m, bool front = false) {
    EvidenceLine e = Evidence(m, names_);
    for (std::size_t i = 0; i < d.evidence.size(); ++i)
      if (d.evidence[i].line == e.line && d.evidence[i].source == e.source) {
        if (front) std::rotate(d.evidence.begin(), d.evidence.begin() + static_cast<std::ptrdiff_t>(i),
                               d.evidence.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        return;
      }
    if (front) {
      d.evidence.insert(d.evidence.begin(), std::move(e));
      if (d.evidence.size() > 6) d.evidence.pop_back();
    } else if (d.evidence.size() < 6) {
      d.evidence.push_back(std::move(e));
    }
  }
  const std::vector<std::string>& names_;
  std::map<std::string, Diagnosis> by_id_;
};

}  // namespace commkit::diagnostics::explain
