// The cause rules ScoreCauses combines. Message rules read one line at a time, one function per
// subsystem, and are called in a fixed order (the order decides which line leads a candidate's evidence
// when two rules hit the same family); the whole-log rules run after them.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "candidates.h"
#include "causes.h"

namespace commkit::diagnostics::explain {

// What the message rules know about the whole log before they read its lines.
struct LogContext {
  const LogFacts& facts;
  std::string ifname;                   // NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, as the log echoes it
  bool single_host = false;             // one host and no interface list
  bool single_host_log = false;         // one host, one input, at most one rank
  bool enospc_anywhere = false;         // an ENOSPC somewhere in the log
  bool access_denied_anywhere = false;  // an EACCES / EPERM somewhere in the log
  bool roce = false;                    // an IB device reports link layer Ethernet (RoCE)
  // tmpfs allocates pages when they are first touched, so a full /dev/shm shows up as SIGBUS inside the
  // shared-memory code rather than as ENOSPC.
  bool bus_error_anywhere = false;
  bool memlock_unlimited = false;  // `ulimit -a` in the log shows max locked memory unlimited
  // NCCL read a topology or graph file it was given (NCCL_TOPO_FILE / NCCL_GRAPH_FILE, e.g. from
  // /etc/nccl.conf) instead of detecting the machine.
  bool topo_file_loaded = false;
  bool store_ctx = false;  // the log is about the rendezvous store (TCPStore, MASTER_PORT ...)
  bool efa_ctx = false;    // the log involves libfabric / EFA / aws-ofi-nccl

  // A variable NCCL echoed ("set by environment to"), or empty.
  std::string Env(const char* key) const {
    auto it = facts.env.find(key);
    return it == facts.env.end() ? std::string() : it->second;
  }
};

// What earlier lines of the log showed (rules read lines in order).
struct LineState {
  bool earlier_cuda_failure = false;
  bool shm_cuda_failure = false;
  // The last line that named the rendezvous store (NamesStore), in input store_source; 0: none yet.
  int store_line = 0, store_source = 0;
};

// One line as the message rules see it.
struct LineView {
  const Message& m;
  const std::string& l;  // m.lower
  std::string topic;     // the catalog entry's topic, or empty
  bool err = false;      // LooksLikeError(m)
};

// Message rules, in the order ScoreCauses calls them.
void ShmRules(const LogContext& log, LineState& state, const LineView& v, Candidates& c);         // host_rules.cc
void SocketRules(const LogContext& log, const LineView& v, Candidates& c);                       // network_rules.cc
void StoreRules(const LogContext& log, LineState& state, const LineView& v, Candidates& c);      // network_rules.cc
void CudaRules(LineState& state, const LineView& v, Candidates& c);                              // cuda_rules.cc
void IbRules(const LogContext& log, const LineView& v, Candidates& c);                           // rdma_rules.cc
void EfaRules(const LogContext& log, const LineView& v, Candidates& c);                          // rdma_rules.cc
void TopoRules(const LogContext& log, const LineView& v, Candidates& c);                         // host_rules.cc
void CollectiveRules(const LineView& v, Candidates& c);                                          // collective_rules.cc
void EnvelopeRules(const LogContext& log, const LineView& v, Candidates& c);                     // collective_rules.cc
void HostRules(const LineView& v, Candidates& c);                                                // host_rules.cc

// Whole-log rules: wrong interface chosen, NCCL versions differing, ranks at different sequence numbers
// (fact_rules.cc); known NCCL bugs by version (known_bugs.cc).
void FactRules(const RuleContext& ctx, Candidates& c);
void KnownBugRules(const RuleContext& ctx, Candidates& c);
void InitStallRules(const RuleContext& ctx, Candidates& c);  // stall_rules.cc
void SetupRules(const RuleContext& ctx, Candidates& c);      // setup_rules.cc
void TracebackDesyncRules(const RuleContext& ctx, Candidates& c);  // traceback_rules.cc

// Helpers shared by the rules.

// Whether `l` contains any of `words`.
inline bool Any(const std::string& l, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (l.find(w) != std::string::npos) return true;
  return false;
}

// The decimal number at l[pos...], or -1.
inline long long NumAt(const std::string& l, std::size_t pos) {
  long long v = -1;
  for (std::size_t i = pos; i < l.size() && i < pos + 18 && l[i] >= '0' && l[i] <= '9'; ++i) v = (v < 0 ? 0 : v * 10) + (l[i] - '0');
  return v;
}

// `w` as a whole word: short names such as "efa" or "ofi" are also parts of common words
// ("default_pg", "profile").
bool HasWord(const std::string& l, std::string_view w);

// The line is about c10d's rendezvous store (TCPStore, init_process_group, MASTER_PORT ...).
bool NamesStore(const std::string& l);

// A TCP connect that failed (refused, timed out, unreachable), in any of the wordings of NCCL, Gloo and c10d.
bool ConnectFailure(const std::string& l);

// aws-ofi-nccl settled on libfabric's tcp / sockets / udp provider ("NET/OFI Selected Provider is tcp"):
// printed at INFO, but no usable efa provider is what it says (rdma_rules.cc).
bool OfiSocketProviderFallback(const std::string& l);

}  // namespace commkit::diagnostics::explain
