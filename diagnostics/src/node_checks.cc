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
#include "commkit/topology/probe.h"
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

using internal::GpuCount;

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
  // Some drivers (seen on a Firecracker VM with an H100, driver 580) leave the line out of /proc; NVML
  // answers the same question.
  if (ev.empty()) {
    const Result<topology::ProbeReport>& rep = ctx.topology();
    if (rep.ok() && rep->gpu.nvml_available) {
      for (const topology::NvmlGpu& g : rep->gpu.gpus) {
        if (!g.persistence_mode) continue;
        const std::string gpu = StrCat("GPU", g.index, " (", g.bus_id, ")");
        ev.push_back(StrCat("NVML nvmlDeviceGetPersistenceMode: ", gpu, " ", *g.persistence_mode ? "enabled" : "disabled"));
        if (!*g.persistence_mode) off.push_back(gpu);
      }
    }
  }
  if (ev.empty()) {
    return Outcome(CheckStatus::kSkip,
                   "persistence mode reported neither in /proc/driver/nvidia/gpus/*/information nor by NVML");
  }
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

}  // namespace

void RegisterNodeChecks(CheckRegistry& r) {
  r.Add({{"shm.size", "/dev/shm is large enough for NCCL's SHM transport", "node"}, ShmSize});
  r.Add({{"limits.memlock", "Locked-memory limit allows RDMA registration", "node"}, Memlock});
  r.Add({{"net.hostname", "Hostname resolves to a routable address", "net"}, Hostname});
  r.Add({{"kernel.xid", "No NVIDIA Xid errors in the kernel log", "kernel"}, KernelXid});
  internal::RegisterNcclEnvChecks(r);  // env.nccl, net.nccl_socket
  r.Add({{"gpu.nvml", "NVML and libcuda load, GPUs visible", "gpu"}, GpuNvml});
  r.Add({{"gpu.driver", "NVIDIA driver version", "gpu"}, GpuDriver});
  r.Add({{"gpu.persistence", "GPU persistence mode", "gpu"}, GpuPersistence});
  r.Add({{"gpu.fabricmanager", "Fabric manager running on NVSwitch systems", "gpu"}, FabricManager});
  r.Add({{"nccl.libs", "One NCCL library version installed", "nccl"}, NcclLibs});
  r.Add({{"rdma.peermem", "GPUDirect RDMA module loaded", "rdma"}, RdmaPeermem});
  r.Add({{"rdma.uverbs", "RDMA user-verbs devices visible", "rdma"}, RdmaUverbs});
}

}  // namespace commkit::diagnostics
