// Node checks of what NCCL reads from its environment: the NCCL_/FI_ variables (unknown names,
// contradictions, values that cannot work here) and the socket interface its bootstrap would pick.
// Registered by RegisterNodeChecks (node_checks.cc), in its order.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/netif.h"
#include "check_support.h"

namespace commkit::diagnostics {
namespace {

using Ctx = CheckContext;
using internal::GpuCount;
using internal::Outcome;
std::map<std::string, std::string> Env(const Ctx& ctx) { return internal::NodeEnv(ctx); }

// --- env.nccl ---------------------------------------------------------------------------------
constexpr const char* kKnownNccl[] = {
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC",
    "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT", "NCCL_IB_SL", "NCCL_IB_TC", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_MERGE_NICS", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_USE_INLINE", "NCCL_IB_ECE_ENABLE",
    "NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS", "NCCL_NET_DISABLE_INTRA", "NCCL_NET_FORCE_FLUSH", "NCCL_NET_OVERHEAD",
    "NCCL_GDR_FLUSH_DISABLE", "NCCL_GDRCOPY_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_P2P_READ_ENABLE",
    "NCCL_SHM_DISABLE", "NCCL_SHM_USE_CUDA_MEMCPY", "NCCL_SHM_MEMCPY_MODE", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
    "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS", "NCCL_LAUNCH_MODE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE",
    "NCCL_GRAPH_FILE", "NCCL_GRAPH_DUMP_FILE", "NCCL_COLLNET_ENABLE", "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_NVLS_ENABLE", "NCCL_NVLS_NCHANNELS", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_CROSS_NIC",
    "NCCL_COMM_ID", "NCCL_HOSTID", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_IGNORE_DISABLED_P2P", "NCCL_MNNVL_ENABLE",
    "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_P2P_PXN_LEVEL", "NCCL_RUNTIME_CONNECT", "NCCL_LOCAL_REGISTER",
    "NCCL_GRAPH_REGISTER", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_LL128_NTHREADS", "NCCL_SET_STACK_SIZE",
    "NCCL_SET_THREAD_NAME", "NCCL_WORK_FIFO_DEPTH", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT",
    "NCCL_CONF_FILE", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_MAX_P2P_NCHANNELS", "NCCL_MIN_P2P_NCHANNELS", "NCCL_CTA_POLICY", "NCCL_NVLS_CHUNKSIZE",
    "NCCL_ENABLE_TIMEOUT", "NCCL_PROXY_APPEND_BATCH_SIZE", "NCCL_CREATE_THREAD_CONTEXT", "NCCL_DMABUF_ENABLE",
    "NCCL_RAS_ENABLE", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_OOB_NET_ENABLE", "NCCL_OOB_NET_IFNAME",
    "NCCL_UID_STAGGER_RATE", "NCCL_UID_STAGGER_THRESHOLD", "NCCL_WIN_ENABLE", "NCCL_SYM_ENABLE", "NCCL_IB_FIFO_TC",
};

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t prev = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}

CheckOutcome EnvNccl(const Ctx& ctx) {
  std::map<std::string, std::string> env = Env(ctx);
  std::vector<std::string> ev, problems, fixes;
  CheckStatus worst = CheckStatus::kPass;
  auto raise = [&](CheckStatus s) {
    if (s == CheckStatus::kFail || worst == CheckStatus::kPass) worst = s;
  };
  for (const auto& [k, v] : env)
    if (StartsWith(k, "NCCL_") || StartsWith(k, "FI_") || k == "CUDA_VISIBLE_DEVICES") ev.push_back(k + "=" + v);
  for (const auto& [k, v] : env) {
    if (!StartsWith(k, "NCCL_")) continue;
    // NVIDIA's CUDA container images set NCCL_VERSION to the NCCL they ship; NCCL never reads it,
    // and the library a job loads (a pip wheel's, say) can be another one.
    if (k == "NCCL_VERSION") {
      ev.push_back("NCCL_VERSION=" + v + " is the container image's label for its NCCL, not an NCCL setting; "
                   "which library loads is nccl.libs' question");
      continue;
    }
    bool known = false;
    std::string best;
    std::size_t best_d = 99;
    for (const char* n : kKnownNccl) {
      if (k == n) known = true;
      std::size_t d = EditDistance(k, n);
      if (d < best_d) best_d = d, best = n;
    }
    if (known) continue;
    if (best_d <= 2) {
      raise(CheckStatus::kWarn);
      problems.push_back(k + " is not an NCCL variable (typo of " + best + "?)");
      fixes.push_back("export " + best + "=" + v + "; unset " + k);
    } else {
      ev.push_back(k + " is not in gpudoctor's list of NCCL variables (newer NCCL or plugin variable?)");
    }
  }
  if (auto it = env.find("NCCL_SOCKET_IFNAME"); it != env.end()) {
    auto ifaces = ctx.system->ListDir("/sys/class/net");
    if (ifaces.ok()) {
      std::string spec = it->second;
      bool exclude = StartsWith(spec, "^");
      if (exclude) spec = spec.substr(1);
      bool exact = StartsWith(spec, "=");
      if (exact) spec = spec.substr(1);
      bool any = false;
      for (const std::string& name : *ifaces)
        for (const std::string& prefix : Split(spec, ',', true))
          if (exact ? name == prefix : StartsWith(name, prefix)) any = true;
      ev.push_back("/sys/class/net: " + Join(*ifaces, " "));
      if (!exclude && !any) {
        raise(CheckStatus::kFail);
        problems.push_back("NCCL_SOCKET_IFNAME=" + it->second + " matches no interface in /sys/class/net (" +
                           Join(*ifaces, " ") + "): NCCL fails with 'Bootstrap : no socket interface found'");
        std::string suggestion;
        for (const std::string& name : *ifaces)
          if (name != "lo" && !StartsWith(name, "docker") && !StartsWith(name, "veth") && suggestion.empty()) suggestion = name;
        fixes.push_back(suggestion.empty() ? "unset NCCL_SOCKET_IFNAME"
                                           : "export NCCL_SOCKET_IFNAME=" + suggestion + " (or unset NCCL_SOCKET_IFNAME)");
      }
    }
  }
  if (env.count("NCCL_P2P_DISABLE") && env["NCCL_P2P_DISABLE"] == "1" && env.count("NCCL_P2P_LEVEL")) {
    raise(CheckStatus::kWarn);
    problems.push_back("NCCL_P2P_DISABLE=1 together with NCCL_P2P_LEVEL=" + env["NCCL_P2P_LEVEL"] +
                       ": contradictory (NCCL_P2P_DISABLE wins)");
    fixes.push_back("unset NCCL_P2P_DISABLE (keep NCCL_P2P_LEVEL) or unset NCCL_P2P_LEVEL");
  }
  if (env.count("NCCL_IB_DISABLE") && env["NCCL_IB_DISABLE"] == "1" && env.count("NCCL_IB_HCA")) {
    raise(CheckStatus::kWarn);
    problems.push_back("NCCL_IB_DISABLE=1 together with NCCL_IB_HCA=" + env["NCCL_IB_HCA"] + ": IB is disabled, NCCL_IB_HCA is ignored");
    fixes.push_back("unset NCCL_IB_DISABLE or NCCL_IB_HCA");
  }
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    const std::string& cvd = it->second;
    int gpus = GpuCount(ctx);
    if (Trim(cvd).empty() || cvd == "-1" || cvd == "NoDevFiles") {
      raise(CheckStatus::kWarn);
      problems.push_back("CUDA_VISIBLE_DEVICES='" + cvd + "' hides every GPU from CUDA");
      fixes.push_back("unset CUDA_VISIBLE_DEVICES (or list the GPU indices/UUIDs to use)");
    } else if (gpus > 0) {
      for (const std::string& entry : Split(cvd, ',', true)) {
        auto index = ParseInt(Trim(entry));
        if (index && (*index < 0 || *index >= gpus)) {
          raise(CheckStatus::kWarn);
          problems.push_back(StrCat("CUDA_VISIBLE_DEVICES=", cvd, " names GPU ", *index, " but the node has ", gpus,
                                    " (CUDA ignores it and every later entry)"));
          fixes.push_back(StrCat("export CUDA_VISIBLE_DEVICES with indices 0..", gpus - 1));
          break;
        }
      }
    }
  }
  if (auto it = env.find("NCCL_DEBUG"); it != env.end() && it->second == "TRACE")
    ev.push_back("NCCL_DEBUG=TRACE is very verbose (only available in debug builds); use INFO for diagnosis");
  if (!env.count("NCCL_DEBUG")) ev.push_back("hint: export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET when reproducing a failure");
  if (worst == CheckStatus::kPass)
    return Outcome(CheckStatus::kPass, env.empty() ? "no NCCL_/FI_ variables set" : "NCCL environment looks consistent", ev);
  return Outcome(worst, Join(problems, "; "), ev, Join(fixes, "; "));
}

// --- net.nccl_socket ---------------------------------------------------------------------------
// The interface NCCL's bootstrap would pick (ncclFindInterfaces rules, NCCL_SOCKET_IFNAME with ^ and
// =), and whether it can work: it exists, is up, and is the one that routes to MASTER_ADDR. The
// 'ncclInternalError' / 'unhandled system error' at init from a wrong or missing interface.
CheckOutcome NcclSocket(const Ctx& ctx) {
  auto net = topology::ProbeNetwork(*ctx.system);
  if (!net.ok()) return Outcome(CheckStatus::kSkip, "cannot read the network interfaces: " + net.status().message());
  if (net->addresses.empty())
    return Outcome(CheckStatus::kSkip, "interface addresses unknown", net->warnings);
  std::map<std::string, std::string> env = Env(ctx);
  topology::NcclSocketOptions options;
  if (auto it = env.find("NCCL_SOCKET_IFNAME"); it != env.end()) options.socket_ifname = it->second;
  if (auto it = env.find("NCCL_SOCKET_FAMILY"); it != env.end()) options.socket_family = it->second;
  if (auto it = env.find("NCCL_COMM_ID"); it != env.end()) options.comm_id = it->second;
  std::vector<std::string> ev;
  for (const auto& nif : net->interfaces) {
    std::vector<std::string> addrs;
    for (const auto& a : nif.addresses) addrs.push_back(a.address + "/" + std::to_string(a.prefix_len));
    ev.push_back(StrCat(nif.name, ": ", nif.up ? "up" : "down", ", mtu ", nif.mtu, nif.is_virtual ? ", virtual" : "",
                        addrs.empty() ? "" : ", " + Join(addrs, " ")));
  }
  std::optional<std::string> master;
  if (auto it = env.find("MASTER_ADDR"); it != env.end() && !it->second.empty()) master = it->second;
  // The interface a peer would be reached through: the route to MASTER_ADDR when it is an address
  // literal, else the interface of the default route, else the first interface that is up, not loopback
  // and not a container/VM bridge.
  std::string routed, route_why;
  if (master) {
    auto m = topology::InterfaceForAddress(*net, *master);
    if (m.ok() && !m->loopback) {
      routed = m->ifname;
      route_why = "routes to MASTER_ADDR=" + *master;
      ev.push_back("MASTER_ADDR=" + *master + " is reached through " + routed);
    } else if (!m.ok()) {
      ev.push_back("MASTER_ADDR=" + *master + ": " + m.status().message());
    }
  }
  if (routed.empty()) {  // the IPv4 default route with the lowest metric, when its interface is up
    const topology::Route* best = nullptr;
    for (const auto& r : net->routes)
      if (r.family == topology::AddressFamily::kIPv4 && r.is_default() && (best == nullptr || r.metric < best->metric)) best = &r;
    const topology::NetInterface* dev = best == nullptr ? nullptr : net->Find(best->ifname);
    if (dev != nullptr && dev->up && !dev->loopback) {
      routed = dev->name;
      route_why = "it holds the default route";
      ev.push_back("default route: " + (best->gateway.empty() ? std::string() : "via " + best->gateway + " ") + "dev " + routed);
    }
  }
  if (routed.empty()) {
    for (const auto& nif : net->interfaces) {
      bool bridge = StartsWith(nif.name, "docker") || StartsWith(nif.name, "veth") || StartsWith(nif.name, "virbr") ||
                    StartsWith(nif.name, "br-") || StartsWith(nif.name, "cni") || StartsWith(nif.name, "flannel");
      if (nif.up && !nif.loopback && !bridge && !nif.addresses.empty()) {
        routed = nif.name;
        route_why = "the first interface that is up, not loopback and not a container bridge";
        break;
      }
    }
  }
  const std::string fix_to = routed.empty() ? "" : "export NCCL_SOCKET_IFNAME=" + routed;
  topology::NcclSocketChoice choice = topology::PredictNcclSocketInterfaces(*net, options);
  ev.push_back("NCCL's rule: " + choice.rule);
  for (const auto& n : choice.notes) ev.push_back(n);
  // Interfaces NCCL_SOCKET_IFNAME names that exist but are down or have no address (e.g. a hard-coded
  // eth0 that is unplugged while the node's traffic goes over ens5).
  std::vector<std::string> unusable;
  if (options.socket_ifname) {
    const topology::IfnameSpec spec = topology::ParseIfnameSpec(*options.socket_ifname);
    for (const auto& nif : net->interfaces) {
      if (spec.exclude || !topology::MatchesIfnameSpec(spec, nif.name) || (nif.up && !nif.addresses.empty())) continue;
      std::vector<std::string> why;
      if (!nif.up) why.push_back("is down (operstate " + (nif.operstate.empty() ? std::string("unknown") : nif.operstate) + ")");
      if (nif.addresses.empty()) why.push_back("has no address");
      unusable.push_back(nif.name + " " + Join(why, " and "));
    }
  }
  for (const auto& u : unusable) ev.push_back("NCCL_SOCKET_IFNAME=" + *options.socket_ifname + " matches an unusable interface: " + u);
  const std::string fix_why = route_why.empty() ? "" : " (" + routed + ": " + route_why + ")";
  if (!choice.found())
    return Outcome(CheckStatus::kFail,
                   "NCCL would find no socket interface (" + choice.rule + (unusable.empty() ? "" : ": " + Join(unusable, "; ")) +
                       "): init fails with 'Bootstrap : no socket interface found' / ncclInternalError",
                   ev, fix_to.empty() ? "set NCCL_SOCKET_IFNAME to an interface that is up and has an address" : fix_to);
  const topology::InterfaceAddress& sel = choice.selected.front();
  const topology::NetInterface* nif = net->Find(sel.ifname);
  std::string picked = sel.ifname + " (" + sel.address + ")";
  if (nif != nullptr && !nif->up)
    return Outcome(CheckStatus::kFail,
                   "NCCL would use " + picked + ", whose link is down (operstate " +
                       (nif->operstate.empty() ? "unknown" : nif->operstate) + "): connections through it hang or time out",
                   ev, fix_to.empty() ? "bring the link up or set NCCL_SOCKET_IFNAME" : fix_to + fix_why);
  if (!routed.empty() && routed != sel.ifname && master)
    return Outcome(CheckStatus::kFail,
                   "NCCL would bootstrap on " + picked + " but MASTER_ADDR=" + *master + " is reached through " + routed +
                       ": peers cannot connect back (ncclInternalError / 'unhandled system error' at init)",
                   ev, fix_to + " on every node (the interface name must exist on all of them)");
  if (nif != nullptr && nif->loopback)
    return Outcome(CheckStatus::kWarn, "NCCL would use the loopback interface " + picked + ": only single-node jobs work",
                   ev, fix_to.empty() ? "set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes" : fix_to);
  if (!options.socket_ifname && !routed.empty() && routed != sel.ifname)
    return Outcome(CheckStatus::kWarn,
                   "NCCL would use " + picked + " by its automatic order, not " + routed + " (" + route_why + ")", ev,
                   fix_to + " if the nodes talk over " + routed);
  return Outcome(CheckStatus::kPass, "NCCL would use " + picked + " (" + choice.rule + ")", ev);
}

}  // namespace

namespace internal {

void RegisterNcclEnvChecks(CheckRegistry& r) {
  r.Add({{"env.nccl", "NCCL_/FI_ environment is consistent", "env"}, EnvNccl});
  r.Add({{"net.nccl_socket", "The socket interface NCCL would pick works", "net"}, NcclSocket});
}

}  // namespace internal
}  // namespace commkit::diagnostics
