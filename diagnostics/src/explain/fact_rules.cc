// Whole-log rules: a virtual interface chosen while connections failed, NCCL versions that differ between
// the inputs, and ranks whose watchdog reports stopped at different sequence numbers or operations.
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

bool IsVirtualInterface(std::string_view n) {
  for (std::string_view p : {"docker", "veth", "virbr", "br-", "lo", "cni", "flannel", "cali", "tun", "vxlan"})
    if (n.rfind(p, 0) == 0 && !(p == "lo" && n.size() > 2 && n != "lo")) return true;
  return false;
}

}  // namespace

// Rules that need the whole picture: wrong interface chosen, version mismatch, desync across ranks.
void FactRules(const RuleContext& ctx, Candidates& c) {
  const LogFacts& f = ctx.facts;
  std::vector<std::string> virt;
  for (const std::string& i : f.interfaces)
    if (IsVirtualInterface(i)) virt.push_back(i);
  bool conn_problem = c.Has("socket.unreachable") || c.Has("store.rendezvous_timeout") || c.Has("socket.peer_closed") ||
                      c.Has("collective.timeout");
  if (!virt.empty() && conn_problem) {
    const Message* use = nullptr;
    for (const Message& m : ctx.messages)
      if (Contains(m.line->body, " : Using ") || Contains(m.line->body, ": Using ")) {
        for (const std::string& v : virt)
          if (Contains(m.line->body, v)) use = &m;
        if (use != nullptr) break;
      }
    c.Hit("socket.wrong_interface", 70, false, "NCCL/Gloo selected a virtual or loopback interface (" + Join(virt, ", ") +
          ") that peers cannot reach, and connections then failed", use);
  }
  // NCCL's bootstrap prefers interfaces named ib* (IPoIB) when NCCL_SOCKET_IFNAME is unset; IPoIB that is
  // not routed between the nodes (or on a different subnet on each) then fails the bootstrap connections.
  std::vector<std::string> ipoib;
  for (const std::string& i : f.interfaces)
    if (i.size() > 2 && i.rfind("ib", 0) == 0 && std::isalnum(static_cast<unsigned char>(i[2]))) ipoib.push_back(i);
  if (!ipoib.empty() && conn_problem && f.env.count("NCCL_SOCKET_IFNAME") == 0 && virt.empty()) {
    const Message* use = nullptr;
    for (const Message& m : ctx.messages)
      if (use == nullptr && (Contains(m.line->body, "Using ") || Contains(m.line->body, "OOB ")))
        for (const std::string& i : ipoib)
          if (Contains(m.line->body, i + ":")) use = &m;
    c.Hit("socket.wrong_interface", ipoib.size() > 1 ? 64 : 56, false,
          "NCCL's bootstrap picked IPoIB (" + Join(ipoib, ", ") + ": ib* interfaces come first when NCCL_SOCKET_IFNAME "
          "is unset" + (ipoib.size() > 1 ? ", and the nodes use different ones" : "") +
          ") and connections then failed: IPoIB not routed between the nodes; name the Ethernet NIC", use);
  }
  // NCCL versions differing (major.minor.patch) within the inputs.
  std::vector<std::string> versions;
  for (const std::string& v : f.nccl_versions) {
    std::string core = v.substr(0, v.find_first_not_of("0123456789."));
    AddUnique(versions, core);
  }
  if (versions.size() > 1) {
    const Message* ev = nullptr;
    for (const Message& m : ctx.messages)
      if (Contains(m.line->body, "NCCL version ")) {
        if (ev == nullptr) ev = &m;
        c.Hit("nccl.version_mismatch", 82, true, "Different NCCL versions in use: " + Join(versions, ", "), &m);
      }
  }
  // Watchdog progress: ranks at different SeqNum / OpType.
  std::map<long long, std::vector<const RankProgress*>> by_seq;
  for (const RankProgress& p : f.progress)
    if (p.seq >= 0) by_seq[p.seq].push_back(&p);
  // Point-to-point work is numbered in the same sequence as collectives, so a rank in SEND and its peer in
  // RECV at one SeqNum is a matched pair, not a desync.
  auto point_to_point = [](const std::string& op) { return op == "SEND" || op == "RECV" || op == "RECVANYSOURCE"; };
  bool different_op = false;
  for (auto& [seq, ps] : by_seq)
    for (const RankProgress* p : ps)
      if (!p->op.empty() && !ps.front()->op.empty() && p->op != ps.front()->op &&
          !(point_to_point(p->op) && point_to_point(ps.front()->op)))
        different_op = true;
  auto evidence_for = [&](std::string_view id) {
    for (const RankProgress& p : f.progress) {
      EvidenceLine e;
      e.line = p.line;
      e.text = p.text;
      if (ctx.names.size() > 1) e.source = p.source;
      c.AddEvidenceLine(id, std::move(e));
    }
  };
  if (different_op) {
    // Several lines together make this case, no single message proves it: medium at most.
    c.Hit("collective.mismatch", 88, false, "Ranks timed out in different collectives at the same sequence number "
          "(desync: they issued different operations)", nullptr);
    evidence_for("collective.mismatch");
  } else if (by_seq.size() > 1) {
    std::string detail;
    for (auto& [seq, ps] : by_seq) {
      std::vector<std::string> ranks;
      for (const RankProgress* p : ps) ranks.push_back(std::to_string(p->rank));
      detail += (detail.empty() ? "" : "; ") + std::string("SeqNum ") + std::to_string(seq) + ": rank(s) " + Join(ranks, ",");
    }
    c.Hit("collective.mismatch", 68, false, "Ranks stopped at different sequence numbers (" + detail +
          "): a rank fell behind or skipped a collective", nullptr);
    evidence_for("collective.mismatch");
  } else if (Diagnosis* d = c.Get("collective.timeout"); d != nullptr && !by_seq.empty()) {
    auto& [seq, ps] = *by_seq.begin();
    d->cause = (ps.size() == 1 ? std::string("The reporting rank") : "All " + std::to_string(ps.size()) + " reporting ranks") +
               " timed out in " +
               (ps.front()->op.empty() ? std::string("the same collective") : ps.front()->op) + " SeqNum=" +
               std::to_string(seq) + ": a rank that did not report (or a slow one) is holding them";
  }
}

}  // namespace commkit::diagnostics::explain
