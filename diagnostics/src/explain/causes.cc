// ScoreCauses: what the rules know about the whole log, the per-line rules (one function per subsystem, in a
// fixed order), the code-driven and whole-log rules, then ranking: the first real error's cause first,
// symptoms below causes, and a proof demoted to medium when another family makes a strong case too.
#include "causes.h"

#include <algorithm>
#include <string>

#include "candidates.h"
#include "similarity.h"
#include "cause_families.h"
#include "code_rules.h"
#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

// `w` as a whole word: short names such as "efa" or "ofi" are also parts of common words
// ("default_pg", "profile").
bool HasWord(const std::string& l, std::string_view w) {
  auto alnum = [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); };
  for (std::size_t at = l.find(w); at != std::string::npos; at = l.find(w, at + 1)) {
    bool left = at == 0 || !alnum(l[at - 1]);
    bool right = at + w.size() >= l.size() || !alnum(l[at + w.size()]);
    if (left && right) return true;
  }
  return false;
}

namespace {

void MessageRules(const RuleContext& ctx, Candidates& c, bool store_ctx, bool efa_ctx) {
  const LogFacts& f = ctx.facts;
  LogContext log{f};
  log.single_host = f.hosts.size() <= 1 && f.interfaces.empty();
  log.single_host_log = f.hosts.size() <= 1 && ctx.names.size() <= 1 && f.ranks.size() <= 1;
  log.ifname = log.Env("NCCL_SOCKET_IFNAME");
  if (log.ifname.empty()) log.ifname = log.Env("GLOO_SOCKET_IFNAME");
  log.enospc_anywhere = std::find(f.errnos.begin(), f.errnos.end(), "ENOSPC") != f.errnos.end();
  log.access_denied_anywhere = std::find(f.errnos.begin(), f.errnos.end(), "EACCES") != f.errnos.end() ||
                               std::find(f.errnos.begin(), f.errnos.end(), "EPERM") != f.errnos.end();
  log.roce = UsesRoce(f);
  for (const Message& m : ctx.messages) {
    if (Any(m.lower, {"sigbus", "bus error"})) log.bus_error_anywhere = true;
    // `ulimit -a` output is the effective limit of that shell; limits.conf lines are only intent.
    if (Contains(m.lower, "max locked memory") && EndsWith(Trim(m.lower), "unlimited") &&
        !Any(m.lower, {"please", "set ", "increase", "raise", "should"}))
      log.memlock_unlimited = true;
    if (Any(m.lower, {"loading topology file", "nccl_topo_file set by", "nccl_graph_file set by", "loading graph file"}))
      log.topo_file_loaded = true;
  }
  if (!log.Env("NCCL_TOPO_FILE").empty() || !log.Env("NCCL_GRAPH_FILE").empty()) log.topo_file_loaded = true;
  log.store_ctx = store_ctx;
  log.efa_ctx = efa_ctx;

  LineState state;
  for (const Message& m : ctx.messages) {
    LineView v{m, m.lower, m.match.entry != nullptr ? m.match.entry->topic : std::string(), LooksLikeError(m)};
    // NCCL INFO lines only feed facts (they echo settings and list devices), except the few warnings
    // NCCL prints at INFO level.
    if (m.line->nccl_info && !v.err && !Any(v.l, {"gpu direct rdma disabled", "peer access device"}) &&
        !OfiSocketProviderFallback(v.l))
      continue;
    ShmRules(log, state, v, c);
    SocketRules(log, v, c);
    StoreRules(log, state, v, c);
    CudaRules(state, v, c);
    IbRules(log, v, c);
    EfaRules(log, v, c);
    TopoRules(log, v, c);
    CollectiveRules(v, c);
    EnvelopeRules(log, v, c);
    HostRules(v, c);
  }
}

}  // namespace

std::vector<Diagnosis> ScoreCauses(const RuleContext& ctx) {
  Candidates c(ctx.names);
  bool store_ctx = false, efa_ctx = false;
  for (const Message& m : ctx.messages) {
    if (NamesStore(m.lower)) store_ctx = true;
    // A log about libfabric / EFA: an errno line there is libfabric's even when the line does not say so
    // (a table row under an `fi_info -p efa` header).
    if (Any(m.lower, {"net/ofi", "aws-ofi", "libfabric", "fi_provider", "fi_info", "fi_getinfo"}) ||
        HasWord(m.lower, "efa"))
      efa_ctx = true;
  }
  for (const auto& [k, v] : ctx.facts.env)
    if (k.rfind("FI_", 0) == 0) efa_ctx = true;
  MessageRules(ctx, c, store_ctx, efa_ctx);
  CodeRules(ctx, c, efa_ctx);
  FactRules(ctx, c);
  KnownBugRules(ctx, c);
  InitStallRules(ctx, c);
  SetupRules(ctx, c);
  TracebackDesyncRules(ctx, c);
  // Specific causes explain the generic symptoms (a closed connection, a collective timeout): keep the
  // symptom, but below them.
  std::vector<Diagnosis> out = c.Take();
  // The cause whose evidence is the first real error outranks causes seen only later (their lines are
  // often consequences: an invalid device ordinal after a failed CUDA call, a CUDA fault reported when
  // NCCL tears down a communicator whose network failed). The bonus exceeds the spread of the medium
  // rules (a completion error at 62, a later illegal memory access at 74): a later line leads only with
  // a case more than 14 points stronger.
  for (Diagnosis& d : out)
    for (const EvidenceLine& e : d.evidence)
      if (e.line == ctx.facts.first_error.line && e.source == ctx.facts.first_error.source) {
        d.score = std::min(99, d.score + 14);
        break;
      }
  bool specific = false;
  for (const Diagnosis& d : out)
    if (d.signature != "socket.peer_closed" && d.signature != "collective.timeout" && d.score >= 50) specific = true;
  if (specific)
    for (Diagnosis& d : out)
      if (d.signature == "socket.peer_closed" || d.signature == "collective.timeout") {
        d.score = std::min(d.score, 30);
        d.confidence = Confidence::kLow;
      }
  std::stable_sort(out.begin(), out.end(), [](const Diagnosis& a, const Diagnosis& b) {
    if (a.score != b.score) return a.score > b.score;
    int la = a.evidence.empty() ? 1 << 30 : a.evidence.front().line;
    int lb = b.evidence.empty() ? 1 << 30 : b.evidence.front().line;
    return la < lb;
  });
  // A proof is only a proof when nothing else in the log makes a strong case too: with two families
  // (shm, socket, cuda, ib ...) both well supported, the log does not say which one broke the run.
  auto family = [](const std::string& id) { return id.substr(0, id.find('.')); };
  if (!out.empty() && out.front().confidence == Confidence::kHigh)
    for (std::size_t i = 1; i < out.size(); ++i)
      if (family(out[i].signature) != family(out.front().signature) && out[i].score >= kStrongScore) {
        out.front().confidence = Confidence::kMedium;
        break;
      }
  if (out.empty())
    if (std::optional<Diagnosis> guess = Resemblance(ctx)) out.push_back(std::move(*guess));
  return out;
}

}  // namespace commkit::diagnostics::explain