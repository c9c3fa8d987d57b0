// Built-in node checks. Every machine read goes through CheckContext::system (files) or a named
// fact (library/system-call answers), so `gpudoctor snapshot` + `--from` replays byte for byte.
// Fact producers never fail: they encode failures in the text ("error: ..."), because SystemView
// does not record failed facts and a replay must see the same answer.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "commkit/common/dynamic_library.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/nccl_libraries.h"
#include "commkit/topology/netif.h"
#include "check_support.h"

namespace commkit::diagnostics {
namespace internal {

std::string FactOr(const CheckContext& ctx, std::string_view name, const std::function<std::string()>& produce) {
  Result<std::string> v = ctx.system->Fact(name, [&]() -> Result<std::string> { return produce(); });
  return v.ok() ? *v : StrCat("error: ", v.status().message());
}

std::map<std::string, std::string> NodeEnv(const CheckContext& ctx) { return topology::NodeEnvironment(*ctx.system); }

}  // namespace internal

namespace {

using Ctx = CheckContext;
using internal::FactOr;
std::map<std::string, std::string> Env(const Ctx& ctx) { return internal::NodeEnv(ctx); }

// Runs a shell command with a bounded runtime (`timeout 2`), returns its stdout (at most 1 MiB).
std::string RunBounded(const std::string& command) {
  std::string full = "timeout 2 " + command + " 2>/dev/null";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) return "error: popen failed";
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0 && out.size() < (1u << 20)) out.append(buf, n);
  pclose(pipe);
  return out;
}

int GpuCount(const Ctx& ctx) {
  auto gpus = ctx.system->ListDir("/proc/driver/nvidia/gpus");
  return gpus.ok() ? static_cast<int>(gpus->size()) : 0;
}

bool HasIb(const Ctx& ctx) {
  auto ib = ctx.system->ListDir("/sys/class/infiniband");
  return ib.ok() && !ib->empty();
}

using internal::Outcome;

// --- shm.size ---------------------------------------------------------------------------------
// Catalog: NCCL's SHM transport creates one ~9.6 MB segment (9637888 bytes) per peer pair
// (fixture 004: "failed to extend /dev/shm/nccl-* to 9637892 bytes ... No space left on device").
constexpr std::int64_t kShmPerPair = 9637888;
constexpr std::int64_t kShmHeadroom = 64ll << 20;

CheckOutcome ShmSize(const Ctx& ctx) {
  std::string fact = FactOr(ctx, "statvfs.dev_shm", [] {
    struct statvfs st {};
    if (statvfs("/dev/shm", &st) != 0) return StrCat("error: statvfs(/dev/shm): ", std::strerror(errno));
    return StrCat("total=", static_cast<std::int64_t>(st.f_blocks) * static_cast<std::int64_t>(st.f_frsize),
                  " avail=", static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize));
  });
  std::int64_t total = -1, avail = -1;
  for (const std::string& part : Split(fact, ' ', true)) {
    if (StartsWith(part, "total=")) total = ParseInt(part.substr(6)).value_or(-1);
    if (StartsWith(part, "avail=")) avail = ParseInt(part.substr(6)).value_or(-1);
  }
  if (total < 0 || avail < 0) return Outcome(CheckStatus::kSkip, "cannot stat /dev/shm: " + fact);
  int gpus = std::max(GpuCount(ctx), 1);
  std::int64_t pairs = static_cast<std::int64_t>(gpus) * (gpus - 1);
  std::int64_t need = pairs * kShmPerPair + kShmHeadroom;
  std::vector<std::string> ev = {StrCat("statvfs(/dev/shm): size ", HumanBytes(static_cast<double>(total)), ", available ",
                                        HumanBytes(static_cast<double>(avail))),
                                 StrCat("local GPUs: ", GpuCount(ctx), " (/proc/driver/nvidia/gpus) -> ", pairs,
                                        " directed peer pairs x 9.6 MB + 64 MiB headroom = ",
                                        HumanBytes(static_cast<double>(need)))};
  std::string fix =
      "docker run --shm-size=1g (or --ipc=host); Kubernetes: mount an emptyDir {medium: Memory, sizeLimit: 1Gi} at "
      "/dev/shm; workaround: NCCL_SHM_DISABLE=1 (slower intra-node traffic)";
  if (avail < need)
    return Outcome(pairs > 0 ? CheckStatus::kFail : CheckStatus::kWarn,
                   StrCat("/dev/shm has ", HumanBytes(static_cast<double>(avail)), " free, NCCL needs about ",
                          HumanBytes(static_cast<double>(need)), " for ", gpus, " GPUs (ENOSPC 'failed to extend /dev/shm')"),
                   ev, fix);
  return Outcome(CheckStatus::kPass, StrCat("/dev/shm has ", HumanBytes(static_cast<double>(avail)), " free"), ev);
}

// --- memlock ----------------------------------------------------------------------------------
CheckOutcome Memlock(const Ctx& ctx) {
  std::string fact = FactOr(ctx, "rlimit.memlock", [] {
    struct rlimit rl {};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return std::string("error: getrlimit failed");
    auto v = [](rlim_t x) { return x == RLIM_INFINITY ? std::string("unlimited") : std::to_string(x); };
    return StrCat("soft=", v(rl.rlim_cur), " hard=", v(rl.rlim_max));
  });
  std::string soft;
  for (const std::string& part : Split(fact, ' ', true))
    if (StartsWith(part, "soft=")) soft = part.substr(5);
  if (soft.empty()) return Outcome(CheckStatus::kSkip, "cannot read the memlock limit: " + fact);
  std::vector<std::string> ev = {"getrlimit(RLIMIT_MEMLOCK): " + fact};
  bool rdma = HasIb(ctx);
  ev.push_back(rdma ? "RDMA devices present in /sys/class/infiniband" : "no RDMA devices in /sys/class/infiniband");
  if (soft == "unlimited") return Outcome(CheckStatus::kPass, "memlock is unlimited", ev);
  std::int64_t bytes = ParseInt(soft).value_or(0);
  std::string fix =
      "/etc/security/limits.conf: '* soft memlock unlimited' and '* hard memlock unlimited'; Slurm: "
      "PropagateResourceLimits=NONE (or -ALL except MEMLOCK) in slurm.conf and LimitMEMLOCK=infinity for slurmd; "
      "docker run --ulimit memlock=-1; systemd units: LimitMEMLOCK=infinity";
  if (bytes < (1ll << 30) && !rdma)
    return Outcome(CheckStatus::kPass,
                   StrCat("memlock limit is ", HumanBytes(static_cast<double>(bytes)),
                          "; too low for RDMA, but no RDMA devices are present"),
                   ev);
  if (bytes < (1ll << 30))
    return Outcome(CheckStatus::kFail,
                   StrCat("memlock limit is ", HumanBytes(static_cast<double>(bytes)),
                          ": ibv_create_qp/ibv_create_cq / ibv_reg_mr will fail for NCCL's IB transport"),
                   ev, fix);
  return Outcome(CheckStatus::kPass, StrCat("memlock limit is ", HumanBytes(static_cast<double>(bytes))), ev);
}

// --- hostname ---------------------------------------------------------------------------------
CheckOutcome Hostname(const Ctx& ctx) {
  std::string host = FactOr(ctx, "hostname", [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return std::string("error: gethostname failed");
    return std::string(buf);
  });
  if (StartsWith(host, "error:")) return Outcome(CheckStatus::kSkip, host);
  std::string addrs = FactOr(ctx, "hostname.addresses", [&] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) return StrCat("error: ", gai_strerror(rc));
    std::vector<std::string> out;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* src = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      inet_ntop(a->ai_family, src, text, sizeof text);
      out.emplace_back(text);
    }
    freeaddrinfo(res);
    return Join(out, " ");
  });
  std::vector<std::string> ev = {"gethostname(): " + host, "getaddrinfo(" + host + "): " + addrs};
  if (StartsWith(addrs, "error:"))
    return Outcome(CheckStatus::kFail, "hostname '" + host + "' does not resolve", ev,
                   "add '<node IP> " + host + "' to /etc/hosts or fix DNS; or set MASTER_ADDR to an IP address");
  std::vector<std::string> list = Split(addrs, ' ', true);
  std::set<std::string> unique(list.begin(), list.end());
  bool all_loopback = std::all_of(unique.begin(), unique.end(),
                                  [](const std::string& a) { return StartsWith(a, "127.") || a == "::1"; });
  if (all_loopback)
    return Outcome(CheckStatus::kWarn,
                   "hostname '" + host + "' resolves only to loopback: peers using it as MASTER_ADDR cannot connect", ev,
                   "remove '" + host + "' from the 127.0.1.1 line in /etc/hosts and map it to the node's routable IP");
  return Outcome(CheckStatus::kPass, "hostname '" + host + "' resolves to " + Join({unique.begin(), unique.end()}, " "), ev);
}

// --- kernel.xid -------------------------------------------------------------------------------
struct XidInfo {
  int code;
  const char* meaning;
  CheckStatus severity;
};
constexpr XidInfo kXids[] = {
    {13, "graphics engine exception (often an application fault)", CheckStatus::kWarn},
    {31, "GPU memory page fault (often an application fault)", CheckStatus::kWarn},
    {43, "GPU stopped processing (user app fault)", CheckStatus::kWarn},
    {48, "double-bit ECC error: reset the GPU / drain the node", CheckStatus::kFail},
    {63, "ECC page retirement / row remapping event", CheckStatus::kWarn},
    {64, "ECC page retirement / row remapping failure", CheckStatus::kFail},
    {74, "NVLink error: check NVLink/NVSwitch health", CheckStatus::kFail},
    {79, "GPU has fallen off the bus: hardware/power/PCIe problem, drain the node", CheckStatus::kFail},
    {92, "high single-bit ECC error rate", CheckStatus::kWarn},
    {94, "contained ECC error: restart the application", CheckStatus::kWarn},
    {95, "uncontained ECC error: GPU reset required", CheckStatus::kFail},
    {119, "GSP RPC timeout: GPU reset required", CheckStatus::kFail},
    {120, "GSP error: GPU reset required", CheckStatus::kFail},
};

CheckOutcome KernelXid(const Ctx& ctx) {
  std::string source = "/var/log/kern.log";
  Result<std::string> log = ctx.system->ReadFile(source, 8 << 20);
  std::string text;
  if (log.ok()) {
    text = *log;
  } else {
    source = "dmesg";
    text = FactOr(ctx, "dmesg", [] { return RunBounded("dmesg"); });
  }
  if (StartsWith(text, "error:") || Trim(text).empty())
    return Outcome(CheckStatus::kSkip, "kernel log not readable (" + source + "); run as root or check `dmesg`");
  static const std::regex kXid(R"(NVRM: Xid \(([^)]*)\): (\d+))");
  std::map<int, int> seen;
  std::vector<std::string> ev;
  CheckStatus worst = CheckStatus::kPass;
  int lineno = 0;
  for (const std::string& line : Split(text, '\n')) {
    ++lineno;
    std::smatch m;
    if (!std::regex_search(line, m, kXid)) continue;
    int code = static_cast<int>(ParseInt(m[2].str()).value_or(0));
    if (seen[code]++ > 0) continue;
    const XidInfo* info = nullptr;
    for (const XidInfo& x : kXids)
      if (x.code == code) info = &x;
    CheckStatus sev = info ? info->severity : CheckStatus::kWarn;
    if (sev == CheckStatus::kFail || (sev == CheckStatus::kWarn && worst == CheckStatus::kPass)) worst = sev;
    ev.push_back(StrCat(source, ":", lineno, ": Xid ", code, " on ", m[1].str(), ": ",
                        info ? info->meaning : "see NVIDIA's Xid catalog"));
  }
  if (seen.empty()) return Outcome(CheckStatus::kPass, "no NVIDIA Xid events in " + source, {"read " + source});
  std::vector<std::string> codes;
  for (auto& [c, n] : seen) codes.push_back(StrCat(c, " (x", n, ")"));
  return Outcome(worst, "NVIDIA Xid events in " + source + ": " + Join(codes, ", "), ev,
                 worst == CheckStatus::kFail ? "drain the node and reset the GPU (nvidia-smi -r -i <gpu>) or reboot; "
                                               "if it recurs, open a hardware ticket with nvidia-bug-report.sh output"
                                             : "check the application at the time of the event; see NVIDIA's Xid catalog");
}

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

// --- gpu.nvml ---------------------------------------------------------------------------------
CheckOutcome GpuNvml(const Ctx& ctx) {
  std::string nvml = FactOr(ctx, "dlopen.nvml", [] {
    auto lib = DynamicLibrary::Open({"libnvidia-ml.so.1"});
    return lib.ok() ? "loaded " + (lib->path().empty() ? lib->name() : lib->path()) : std::string("libnvidia-ml.so.1 not found");
  });
  std::string cuda = FactOr(ctx, "dlopen.cuda", [] {
    auto lib = DynamicLibrary::Open({"libcuda.so.1"});
    return lib.ok() ? "loaded " + (lib->path().empty() ? lib->name() : lib->path()) : std::string("libcuda.so.1 not found");
  });
  std::vector<std::string> ev = {"dlopen(libnvidia-ml.so.1): " + nvml, "dlopen(libcuda.so.1): " + cuda,
                                 StrCat("/proc/driver/nvidia/gpus: ", GpuCount(ctx), " GPUs")};
  if (!StartsWith(nvml, "loaded")) return Outcome(CheckStatus::kSkip, "libnvidia-ml.so.1 not found", ev);
  if (!StartsWith(cuda, "loaded"))
    return Outcome(CheckStatus::kFail, "NVML loads but libcuda.so.1 does not", ev,
                   "install the driver's user-space libraries in the container (nvidia-container-toolkit: --gpus all)");
  if (GpuCount(ctx) == 0)
    return Outcome(CheckStatus::kWarn, "driver libraries load but no GPU is listed in /proc/driver/nvidia/gpus", ev,
                   "check CUDA_VISIBLE_DEVICES / container --gpus flags and `nvidia-smi`");
  return Outcome(CheckStatus::kPass, StrCat(GpuCount(ctx), " GPUs visible, NVML and libcuda load"), ev);
}

// --- gpu.driver -------------------------------------------------------------------------------
CheckOutcome GpuDriver(const Ctx& ctx) {
  auto v = ctx.system->ReadFile("/proc/driver/nvidia/version");
  if (!v.ok()) return Outcome(CheckStatus::kSkip, "no NVIDIA driver: /proc/driver/nvidia/version not present");
  std::string first = std::string(Trim(Split(*v, '\n').front()));
  static const std::regex kVer(R"((\d+\.\d+(\.\d+)?))");
  std::smatch m;
  std::string ver = std::regex_search(first, m, kVer) ? m[1].str() : "?";
  return Outcome(CheckStatus::kPass, "NVIDIA driver " + ver, {"/proc/driver/nvidia/version: " + first});
}

// --- gpu.persistence --------------------------------------------------------------------------
CheckOutcome GpuPersistence(const Ctx& ctx) {
  auto gpus = ctx.system->ListDir("/proc/driver/nvidia/gpus");
  if (!gpus.ok() || gpus->empty()) return Outcome(CheckStatus::kSkip, "no GPUs in /proc/driver/nvidia/gpus");
  std::vector<std::string> ev, off;
  for (const std::string& g : *gpus) {
    auto info = ctx.system->ReadFile("/proc/driver/nvidia/gpus/" + g + "/information");
    if (!info.ok()) continue;
    for (const std::string& line : Split(*info, '\n'))
      if (line.find("Persistence") != std::string::npos) {
        ev.push_back(g + ": " + std::string(Trim(line)));
        if (line.find("Disabled") != std::string::npos || line.find("Off") != std::string::npos) off.push_back(g);
      }
  }
  if (ev.empty()) return Outcome(CheckStatus::kSkip, "persistence mode not reported in /proc/driver/nvidia/gpus/*/information");
  if (!off.empty())
    return Outcome(CheckStatus::kWarn, "persistence mode off on " + Join(off, " ") + " (slow, variable CUDA init)", ev,
                   "systemctl enable --now nvidia-persistenced (or nvidia-smi -pm 1)");
  return Outcome(CheckStatus::kPass, "persistence mode enabled", ev);
}

// --- nccl.libs --------------------------------------------------------------------------------
// The NCCL core libraries and the net plugin NCCL would load, as topology/nccl_libraries.h finds them: the
// loader path (LD_LIBRARY_PATH, /etc/ld.so.conf, the system dirs), CUDA's and NCCL's install dirs and
// the nvidia-nccl-cu* wheel that PyTorch pulls in (libnccl.so.2 only: the version from nccl.h).
CheckOutcome NcclLibs(const Ctx& ctx) {
  const topology::NcclLibraries libs = topology::FindNcclLibraries(*ctx.system, Env(ctx));
  std::map<std::string, std::vector<std::string>> versions;
  for (const topology::NcclCoreLibrary& l : libs.core) versions[l.version].push_back(l.path);
  std::vector<std::string> ev;
  for (auto& [v, paths] : versions) ev.push_back("NCCL " + v + ": " + Join(paths, " "));
  if (versions.empty()) ev.push_back("searched: " + Join(libs.dirs.All(), " "));
  for (std::string& line : topology::NcclNetPluginEvidence(libs)) ev.push_back(std::move(line));
  if (versions.empty())
    return Outcome(CheckStatus::kSkip,
                   "no libnccl.so.* on the loader path (LD_LIBRARY_PATH, /etc/ld.so.conf) nor in the system, CUDA or "
                   "Python (nvidia-nccl wheel) library dirs",
                   ev);
  if (versions.size() > 1)
    return Outcome(CheckStatus::kWarn, "several NCCL libraries installed: " + Join(libs.Versions(), ", ") +
                                           " (which one loads depends on LD_LIBRARY_PATH / wheel order; mixed versions across ranks fail)",
                   ev,
                   "keep one: pip uninstall the extra nvidia-nccl-cu* wheel or remove the stale libnccl; check with "
                   "NCCL_DEBUG=VERSION (prints 'NCCL version X.Y.Z') on every node");
  return Outcome(CheckStatus::kPass, "NCCL " + versions.begin()->first, ev);
}

// --- rdma.peermem / rdma.uverbs ---------------------------------------------------------------
CheckOutcome RdmaPeermem(const Ctx& ctx) {
  if (!HasIb(ctx)) return Outcome(CheckStatus::kSkip, "no RDMA devices in /sys/class/infiniband");
  if (GpuCount(ctx) == 0) return Outcome(CheckStatus::kSkip, "no GPUs: GPUDirect RDMA not applicable");
  std::vector<std::string> ev;
  for (const char* m : {"/sys/module/nvidia_peermem", "/sys/module/nv_peer_mem"})
    ev.push_back(std::string(m) + (ctx.system->Exists(m) ? ": present" : ": absent"));
  if (ctx.system->Exists("/sys/module/nvidia_peermem") || ctx.system->Exists("/sys/module/nv_peer_mem"))
    return Outcome(CheckStatus::kPass, "GPUDirect RDMA kernel module loaded", ev);
  return Outcome(CheckStatus::kWarn, "IB/RoCE devices present but neither nvidia_peermem nor nv_peer_mem is loaded: NCCL "
                                     "reports 'GPU Direct RDMA Disabled' unless dma-buf is used",
                 ev, "modprobe nvidia_peermem (and add it to /etc/modules-load.d/); NCCL >= 2.23.4 also detects nvidia_peermem");
}

CheckOutcome RdmaUverbs(const Ctx& ctx) {
  if (!HasIb(ctx)) return Outcome(CheckStatus::kSkip, "no RDMA devices in /sys/class/infiniband");
  auto ib = ctx.system->ListDir("/sys/class/infiniband");
  auto dev = ctx.system->ListDir("/dev/infiniband");
  std::vector<std::string> ev = {"/sys/class/infiniband: " + Join(*ib, " ")};
  int uverbs = 0;
  if (dev.ok())
    for (const std::string& d : *dev)
      if (StartsWith(d, "uverbs")) ++uverbs;
  ev.push_back(dev.ok() ? "/dev/infiniband: " + Join(*dev, " ") : "/dev/infiniband: absent");
  if (uverbs == 0)
    return Outcome(CheckStatus::kFail, "RDMA devices exist but no /dev/infiniband/uverbs* is visible (container without the devices?)",
                   ev, "docker run --device=/dev/infiniband --cap-add=IPC_LOCK (k8s: RDMA device plugin); EFA: pass /dev/infiniband/uverbs*");
  return Outcome(CheckStatus::kPass, StrCat(uverbs, " uverbs devices visible"), ev);
}

// --- gpu.fabricmanager ------------------------------------------------------------------------
CheckOutcome FabricManager(const Ctx& ctx) {
  auto devices = ctx.system->ListDir("/sys/bus/pci/devices");
  if (!devices.ok()) return Outcome(CheckStatus::kSkip, "/sys/bus/pci/devices not readable");
  std::vector<std::string> nvswitches;
  for (const std::string& d : *devices) {
    std::string base = "/sys/bus/pci/devices/" + d;
    auto vendor = ctx.system->ReadAttr(base + "/vendor");
    if (!vendor.ok() || *vendor != "0x10de") continue;
    auto cls = ctx.system->ReadAttr(base + "/class");
    if (cls.ok() && StartsWith(*cls, "0x0680")) nvswitches.push_back(d);
  }
  if (nvswitches.empty()) return Outcome(CheckStatus::kSkip, "no NVSwitch (PCI 10de class 0x0680) devices");
  std::string state = FactOr(ctx, "systemctl.nvidia-fabricmanager",
                             [] { return std::string(Trim(RunBounded("systemctl is-active nvidia-fabricmanager"))); });
  std::vector<std::string> ev = {"NVSwitch PCI devices: " + Join(nvswitches, " "),
                                 "systemctl is-active nvidia-fabricmanager: " + (state.empty() ? "(no answer)" : state)};
  if (state == "active") return Outcome(CheckStatus::kPass, "nvidia-fabricmanager is active", ev);
  return Outcome(CheckStatus::kFail, "NVSwitch system without an active nvidia-fabricmanager: CUDA returns "
                                     "cudaErrorSystemNotReady (802) 'system not yet initialized'",
                 ev, "systemctl enable --now nvidia-fabricmanager (version must match the driver)");
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

void RegisterNodeChecks(CheckRegistry& r) {
  r.Add({{"shm.size", "/dev/shm is large enough for NCCL's SHM transport", "node"}, ShmSize});
  r.Add({{"limits.memlock", "Locked-memory limit allows RDMA registration", "node"}, Memlock});
  r.Add({{"net.hostname", "Hostname resolves to a routable address", "net"}, Hostname});
  r.Add({{"kernel.xid", "No NVIDIA Xid errors in the kernel log", "kernel"}, KernelXid});
  r.Add({{"env.nccl", "NCCL_/FI_ environment is consistent", "env"}, EnvNccl});
  r.Add({{"net.nccl_socket", "The socket interface NCCL would pick works", "net"}, NcclSocket});
  r.Add({{"gpu.nvml", "NVML and libcuda load, GPUs visible", "gpu"}, GpuNvml});
  r.Add({{"gpu.driver", "NVIDIA driver version", "gpu"}, GpuDriver});
  r.Add({{"gpu.persistence", "GPU persistence mode", "gpu"}, GpuPersistence});
  r.Add({{"gpu.fabricmanager", "Fabric manager running on NVSwitch systems", "gpu"}, FabricManager});
  r.Add({{"nccl.libs", "One NCCL library version installed", "nccl"}, NcclLibs});
  r.Add({{"rdma.peermem", "GPUDirect RDMA module loaded", "rdma"}, RdmaPeermem});
  r.Add({{"rdma.uverbs", "RDMA user-verbs devices visible", "rdma"}, RdmaUverbs});
}

}  // namespace commkit::diagnostics
