// GPU health checks from NVML facts (through the run's shared probe, CheckContext::topology):
// gpu.visibility (NVML vs CUDA vs CUDA_VISIBLE_DEVICES, driver and CUDA versions), gpu.nvlink (per-link state, counts and peer symmetry), gpu.ecc (ECC mode, row remapping) and
// gpu.clocks (clocks event reasons decoded per NVML's nvmlClocksEventReason* bits). Each skips with
// the reason when NVML is absent (no driver) or reports no GPU.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/probe.h"
#include "check_support.h"

namespace commkit::diagnostics {
namespace {

using topology::NvmlGpu;
using topology::ProbeReport;

using internal::Outcome;

// The probe's NVML view, or the skip outcome explaining why there is none.
const ProbeReport* NvmlReport(const CheckContext& ctx, CheckOutcome& skip) {
  const Result<ProbeReport>& rep = ctx.topology();
  if (!rep.ok()) {
    skip = Outcome(CheckStatus::kSkip, "cannot probe the machine: " + rep.status().ToString());
    return nullptr;
  }
  if (!rep->gpu.nvml_available) {
    const topology::ProberStatus* p = rep->Prober("nvml");
    std::string why = !rep->gpu.nvml_error.empty() ? rep->gpu.nvml_error : p != nullptr ? p->detail : "NVML not probed";
    skip = Outcome(CheckStatus::kSkip, "no NVIDIA driver: " + why);
    return nullptr;
  }
  if (rep->gpu.gpus.empty()) {
    skip = Outcome(CheckStatus::kSkip, StrCat("NVML (driver ", rep->gpu.driver_version, ") reports no GPU"));
    return nullptr;
  }
  return &*rep;
}

// "00000000:18:00.0" and "0000:18:00.0" name the same function.
std::string BusKey(std::string_view bus_id) {
  std::string s = ToLower(Trim(bus_id));
  auto colon = s.find(':');
  if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos && colon > 4) s = s.substr(colon - 4);
  return s;
}

std::string JoinInts(const std::vector<int>& v, std::string_view sep) {
  std::vector<std::string> s;
  for (int i : v) s.push_back(std::to_string(i));
  return Join(s, sep);
}

std::string Name(const NvmlGpu& g) {
  return StrCat("GPU", g.index, " (", g.bus_id.empty() ? "?" : g.bus_id, g.name.empty() ? "" : ", " + g.name, ")");
}

// --- gpu.nvlink ------------------------------------------------------------------------------
struct LinkCounts {
  int supported = 0, active = 0;
  std::vector<int> inactive;
};

LinkCounts Count(const NvmlGpu& g) {
  LinkCounts c;
  if (g.nvlinks.empty()) {  // older fact: only the active links' remotes are known
    c.supported = c.active = static_cast<int>(g.nvlink_remote_bus_ids.size());
    return c;
  }
  for (const auto& l : g.nvlinks) {
    ++c.supported;
    if (l.active) ++c.active;
    else c.inactive.push_back(l.link);
  }
  return c;
}

CheckOutcome NvLink(const CheckContext& ctx) {
  CheckOutcome skip;
  const ProbeReport* rep = NvmlReport(ctx, skip);
  if (rep == nullptr) return skip;
  const auto& gpus = rep->gpu.gpus;
  std::vector<LinkCounts> counts;
  int max_active = 0, total_supported = 0;
  for (const NvmlGpu& g : gpus) {
    counts.push_back(Count(g));
    max_active = std::max(max_active, counts.back().active);
    total_supported += counts.back().supported;
  }
  if (total_supported == 0) return Outcome(CheckStatus::kSkip, StrCat("no NVLink on the ", gpus.size(), " GPU(s) (PCIe only)"));
  // Link indices active on at least one GPU: an index down on one GPU but up on its peers is a broken
  // link, not a board that never wired it.
  std::set<int> active_somewhere;
  for (const NvmlGpu& g : gpus)
    for (const auto& l : g.nvlinks)
      if (l.active) active_somewhere.insert(l.link);
  std::vector<std::string> ev, problems;
  std::vector<const NvmlGpu*> bad;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const LinkCounts& c = counts[i];
    std::string line = StrCat(Name(gpus[i]), ": ", c.active, "/", c.supported, " NVLink(s) active");
    if (!c.inactive.empty()) line += StrCat(", inactive: link ", JoinInts(c.inactive, ", link "));
    ev.push_back(line);
    bool broken = c.active < max_active;
    for (int l : c.inactive) broken = broken || active_somewhere.count(l) > 0;
    if (broken) {
      bad.push_back(&gpus[i]);
      problems.push_back(StrCat(Name(gpus[i]), " has ", c.active, " active link(s) where its peers have up to ", max_active,
                                c.inactive.empty() ? "" : StrCat(" (link ", JoinInts(c.inactive, ", "), " down)")));
    }
  }
  // Direct GPU-GPU links (no NVSwitch) must be symmetric: A lists B as often as B lists A.
  std::map<std::string, const NvmlGpu*> by_bus;
  for (const NvmlGpu& g : gpus) by_bus[BusKey(g.bus_id)] = &g;
  std::map<std::pair<int, int>, int> pair_links;
  for (const NvmlGpu& g : gpus)
    for (const std::string& remote : g.nvlink_remote_bus_ids)
      if (auto it = by_bus.find(BusKey(remote)); it != by_bus.end()) ++pair_links[{g.index, it->second->index}];
  for (const auto& [pair, n] : pair_links) {
    if (pair.first > pair.second) continue;
    auto back = pair_links.find({pair.second, pair.first});
    const int m = back == pair_links.end() ? 0 : back->second;
    if (m != n) {
      problems.push_back(StrCat("GPU", pair.first, " sees ", n, " link(s) to GPU", pair.second, " but GPU", pair.second, " sees ", m,
                                " back"));
      for (const NvmlGpu& g : gpus)
        if ((g.index == pair.first || g.index == pair.second) && std::find(bad.begin(), bad.end(), &g) == bad.end())
          bad.push_back(&g);
    }
  }
  if (rep->system.nvswitch_present) ev.push_back("NVSwitch present (PCI 10de class 0x0680): links go through the fabric");
  if (problems.empty()) {
    if (max_active == 0)
      return Outcome(CheckStatus::kWarn, "GPUs support NVLink but none is active: GPU traffic goes over PCIe", ev,
                  rep->system.nvswitch_present ? "systemctl status nvidia-fabricmanager; nvidia-smi nvlink -s"
                                               : "nvidia-smi nvlink -s  (fit the NVLink bridges if the board expects them)");
    return Outcome(CheckStatus::kPass, StrCat(gpus.size(), " GPU(s) with ", max_active, " active NVLink(s) each"), ev);
  }
  std::vector<std::string> idx;
  for (const NvmlGpu* g : bad) idx.push_back(std::to_string(g->index));
  const std::string first = idx.empty() ? "0" : idx.front();
  std::string fix = StrCat("nvidia-smi nvlink -s -i ", first, " (state) and nvidia-smi nvlink -e -i ", first, " (error counters)");
  if (rep->system.nvswitch_present) fix += "; check the fabric manager: systemctl status nvidia-fabricmanager";
  fix += StrCat("; when the GPU is idle reset it: nvidia-smi -r -i ", first,
                " (or reboot); if the link stays down, drain the node and have the GPU/baseboard serviced. Until then "
                "NCCL routes around it over PCIe (slower, uneven rings)");
  return Outcome(CheckStatus::kFail, StrCat("NVLink down or asymmetric on ", bad.size(), " GPU(s): ", Join(problems, "; ")), ev, fix);
}

// --- gpu.ecc ---------------------------------------------------------------------------------
// Row remapping (Ampere and later): up to 512 remaps per GPU; NVIDIA's RMA criterion is the
// remapping-failure flag. gpudoctor warns well before the spares run out and fails at the cap.
constexpr unsigned kRemapRowsWarn = 64;
constexpr unsigned kRemapRowsFail = 512;

bool Datacenter(const std::string& name) {
  static const std::regex kDc(
      R"(\b(Tesla|A100|A800|A30|A40|A10G?|A16|A2|H100|H800|H200|H20|GH200|B100|B200|GB200|B300|GB300|L40S?|L20|L4|T4|V100|P100|P40)\b)",
      std::regex::icase);
  return std::regex_search(name, kDc);
}

CheckOutcome Ecc(const CheckContext& ctx) {
  CheckOutcome skip;
  const ProbeReport* rep = NvmlReport(ctx, skip);
  if (rep == nullptr) return skip;
  std::vector<std::string> ev, warn, fail, fixes;
  int reported = 0;
  for (const NvmlGpu& g : rep->gpu.gpus) {
    std::vector<std::string> parts;
    if (g.ecc_enabled) parts.push_back(*g.ecc_enabled ? "ECC on" : "ECC off");
    if (g.remapped_rows_uncorrectable) parts.push_back(StrCat(*g.remapped_rows_uncorrectable, " row(s) remapped for uncorrectable errors"));
    if (g.remap_pending) parts.push_back(*g.remap_pending ? "remap PENDING" : "no remap pending");
    if (g.remap_failure && *g.remap_failure) parts.push_back("remap FAILURE");
    if (parts.empty()) continue;
    ++reported;
    ev.push_back(StrCat(Name(g), ": ", Join(parts, ", ")));
    if (g.remap_failure && *g.remap_failure) {
      fail.push_back(StrCat("GPU", g.index, " row remapping failed (no spare row left for an uncorrectable error)"));
      fixes.push_back(StrCat("drain the node and RMA GPU", g.index, " (", g.bus_id,
                             "): run the NVIDIA field diagnostic / `dcgmi diag -r 3` and open a case"));
    } else if (g.remapped_rows_uncorrectable && *g.remapped_rows_uncorrectable >= kRemapRowsFail) {
      fail.push_back(StrCat("GPU", g.index, " has ", *g.remapped_rows_uncorrectable, " rows remapped (the ", kRemapRowsFail, " spare rows are used up)"));
      fixes.push_back(StrCat("drain the node and RMA GPU", g.index, " (", g.bus_id, ")"));
    } else if (g.remapped_rows_uncorrectable && *g.remapped_rows_uncorrectable >= kRemapRowsWarn) {
      warn.push_back(StrCat("GPU", g.index, " has ", *g.remapped_rows_uncorrectable, " rows remapped for uncorrectable errors"));
      fixes.push_back(StrCat("plan to replace GPU", g.index, "; watch `nvidia-smi -q -d ROW_REMAPPER -i ", g.index, "`"));
    }
    if (g.remap_pending && *g.remap_pending) {
      warn.push_back(StrCat("GPU", g.index, " has a row remap pending (takes effect at the next GPU reset; until then the bad row is in use)"));
      fixes.push_back(StrCat("when GPU", g.index, " is idle: nvidia-smi -r -i ", g.index, " (or reboot)"));
    }
    if (g.ecc_enabled && !*g.ecc_enabled && Datacenter(g.name)) {
      warn.push_back(StrCat("ECC is off on datacenter GPU", g.index, " (memory errors go undetected)"));
      fixes.push_back(StrCat("nvidia-smi -i ", g.index, " -e 1 then reboot"));
    }
  }
  if (reported == 0) return Outcome(CheckStatus::kSkip, "NVML reports neither ECC mode nor row remapping for these GPUs", ev);
  if (!fail.empty())
    return Outcome(CheckStatus::kFail, Join(fail, "; ") + (warn.empty() ? "" : "; " + Join(warn, "; ")), ev, Join(fixes, "; "));
  if (!warn.empty()) return Outcome(CheckStatus::kWarn, Join(warn, "; "), ev, Join(fixes, "; "));
  return Outcome(CheckStatus::kPass, StrCat(reported, " GPU(s): ECC and row remapping healthy"), ev);
}

// --- gpu.clocks ------------------------------------------------------------------------------
// nvmlClocksEventReason* bits (nvml.h; the same values as the older ClocksThrottleReason names).
enum class ClockSeverity { kIgnore, kInfo, kWarn, kFail };
struct ClockReason {
  std::uint64_t bit;
  const char* name;
  ClockSeverity severity;
  const char* meaning;
};
constexpr ClockReason kClockReasons[] = {
    {0x1, "GpuIdle", ClockSeverity::kIgnore, "nothing running"},
    {0x2, "ApplicationsClocksSetting", ClockSeverity::kIgnore, "application clocks set by the admin"},
    {0x4, "SwPowerCap", ClockSeverity::kInfo, "at the software power limit (normal under full load)"},
    {0x8, "HwSlowdown", ClockSeverity::kFail, "hardware slowdown: temperature or power-brake signal, clocks cut hard"},
    {0x10, "SyncBoost", ClockSeverity::kIgnore, "held to the sync-boost group's clocks"},
    {0x20, "SwThermalSlowdown", ClockSeverity::kWarn, "GPU or memory above its max operating temperature"},
    {0x40, "HwThermalSlowdown", ClockSeverity::kFail, "hardware thermal slowdown: the GPU is too hot"},
    {0x80, "HwPowerBrakeSlowdown", ClockSeverity::kFail, "external power-brake assertion (power supply/PSU issue)"},
    {0x100, "DisplayClockSetting", ClockSeverity::kIgnore, "display clock setting"},
};

std::string Hex(std::uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), kDigits[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

CheckOutcome Clocks(const CheckContext& ctx) {
  CheckOutcome skip;
  const ProbeReport* rep = NvmlReport(ctx, skip);
  if (rep == nullptr) return skip;
  std::vector<std::string> ev, warn, fail;
  std::vector<int> hot, brake;
  int reported = 0;
  for (const NvmlGpu& g : rep->gpu.gpus) {
    if (!g.clocks_event_reasons) continue;
    ++reported;
    const std::uint64_t mask = *g.clocks_event_reasons;
    std::vector<std::string> names;
    std::uint64_t known = 0;
    ClockSeverity worst = ClockSeverity::kIgnore;
    std::vector<std::string> meaning, notes;
    for (const ClockReason& r : kClockReasons) {
      known |= r.bit;
      if ((mask & r.bit) == 0) continue;
      names.push_back(r.name);
      if (r.severity >= ClockSeverity::kWarn) meaning.push_back(StrCat(r.name, " (", r.meaning, ")"));
      if (r.severity == ClockSeverity::kInfo) notes.push_back(StrCat(r.name, ": ", r.meaning));
      worst = std::max(worst, r.severity);
    }
    if ((mask & ~known) != 0) names.push_back(StrCat("unknown bits ", Hex(mask & ~known)));
    ev.push_back(StrCat(Name(g), ": clocks event reasons ", Hex(mask), " = ", names.empty() ? "None" : Join(names, " | "),
                        notes.empty() ? "" : " [" + Join(notes, "; ") + "]"));
    const std::string what = StrCat("GPU", g.index, " ", Join(meaning, ", "));
    if (worst == ClockSeverity::kFail) {
      fail.push_back(what);
      ((mask & 0x80) != 0 && (mask & 0x40) == 0 ? brake : hot).push_back(g.index);
    } else if (worst == ClockSeverity::kWarn) {
      warn.push_back(what);
      hot.push_back(g.index);
    }
  }
  if (reported == 0) return Outcome(CheckStatus::kSkip, "NVML reports no clocks event reasons for these GPUs", ev);
  std::vector<std::string> fixes;
  auto list = [](const std::vector<int>& v) { return JoinInts(v, ","); };
  if (!hot.empty())
    fixes.push_back(StrCat("confirm with nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i ", list(hot),
                           "; check fans, airflow, inlet temperature and blanking panels; if it persists on an idle, cool "
                           "node, drain it for service"));
  if (!brake.empty())
    fixes.push_back(StrCat("power brake on GPU ", list(brake), ": check the PSUs and power feed (ipmitool sdr; BMC event log); "
                           "drain the node until the power fault is fixed"));
  if (!fail.empty()) return Outcome(CheckStatus::kFail, "hardware clock slowdown: " + Join(fail, "; "), ev, Join(fixes, "; "));
  if (!warn.empty()) return Outcome(CheckStatus::kWarn, "thermal clock slowdown: " + Join(warn, "; "), ev, Join(fixes, "; "));
  return Outcome(CheckStatus::kPass, StrCat(reported, " GPU(s) without hardware or thermal clock slowdown"), ev);
}

// --- gpu.visibility --------------------------------------------------------------------------
// NVML lists every GPU the driver gives this container/VM; CUDA shows a process those that
// CUDA_VISIBLE_DEVICES selects. CUDA reads the list in order and stops at the first entry that names
// no GPU (that entry and every later one are ignored); entries are indices or GPU-UUID prefixes.
struct Expected {
  std::optional<int> count;  // unknown for MIG entries
  std::string note;          // why the list stops early, when it does
};

Expected CudaVisibleCount(const std::optional<std::string>& cvd, const std::vector<NvmlGpu>& gpus) {
  if (!cvd) return {static_cast<int>(gpus.size()), ""};
  std::set<int> picked;
  for (const std::string& raw : Split(*cvd, ',', true)) {
    const std::string e(Trim(raw));
    if (StartsWith(e, "MIG-")) return {std::nullopt, "MIG instance " + e + " (count not predicted)"};
    int match = -1;
    if (auto i = ParseInt(e); i && *i >= 0 && *i < static_cast<std::int64_t>(gpus.size())) {
      match = static_cast<int>(*i);
    } else if (StartsWith(e, "GPU-") && e.size() > 4) {
      for (const NvmlGpu& g : gpus)
        if (StartsWith(g.uuid, e)) match = match == -1 ? g.index : -2;  // ambiguous prefix: no match
    }
    if (match < 0)
      return {static_cast<int>(picked.size()),
              StrCat("entry '", e, "' names no GPU of the ", gpus.size(), ": CUDA ignores it and every later entry")};
    picked.insert(match);
  }
  return {static_cast<int>(picked.size()), ""};
}

std::string CudaVersion(int v) { return v <= 0 ? "unknown" : StrCat(v / 1000, ".", (v % 1000) / 10); }

CheckOutcome Visibility(const CheckContext& ctx) {
  CheckOutcome skip;
  const ProbeReport* rep = NvmlReport(ctx, skip);
  if (rep == nullptr) return skip;
  const auto& gpu = rep->gpu;
  const int nvml_n = static_cast<int>(gpu.gpus.size());
  std::vector<std::string> names;
  for (const NvmlGpu& g : gpu.gpus) names.push_back(Name(g));
  const std::string versions = StrCat("driver ", gpu.driver_version.empty() ? "?" : gpu.driver_version, ", CUDA ",
                                      CudaVersion(gpu.cuda_driver_version));
  std::vector<std::string> ev = {
      StrCat("NVML: ", nvml_n, " GPU(s): ", Join(names, ", ")),
      StrCat("NVML: driver ", gpu.driver_version.empty() ? "?" : gpu.driver_version, ", CUDA driver API ",
             CudaVersion(gpu.cuda_driver_version), " (nvmlSystemGetCudaDriverVersion_v2 = ", gpu.cuda_driver_version,
             "): the newest CUDA runtime this driver supports without a compat package")};
  const std::map<std::string, std::string> env = internal::NodeEnv(ctx);
  std::optional<std::string> cvd;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) cvd = it->second;
  ev.push_back(cvd ? "CUDA_VISIBLE_DEVICES=" + *cvd : "CUDA_VISIBLE_DEVICES not set");
  const Expected want = CudaVisibleCount(cvd, gpu.gpus);
  if (!want.note.empty()) ev.push_back("CUDA_VISIBLE_DEVICES: " + want.note);
  CheckStatus status = CheckStatus::kPass;
  std::vector<std::string> problems, fixes;
  if (auto listed = ctx.system->ListDir("/proc/driver/nvidia/gpus"); listed.ok()) {
    ev.push_back(StrCat("/proc/driver/nvidia/gpus: ", listed->size(), " GPU(s)"));
    if (static_cast<int>(listed->size()) > nvml_n) {
      status = CheckStatus::kWarn;
      problems.push_back(StrCat("the driver lists ", listed->size(), " GPUs in /proc/driver/nvidia/gpus but NVML sees ", nvml_n,
                                " (a GPU NVML cannot initialise, or a container showing the host's list)"));
      fixes.push_back("nvidia-smi -L; dmesg | grep -i -E 'NVRM|Xid'");
    }
  }
  if (!gpu.cuda_available) {
    const bool hidden = want.count && *want.count == 0;
    ev.push_back("CUDA: " + (gpu.cuda_error.empty() ? std::string("not probed") : gpu.cuda_error));
    if (hidden) {
      status = CheckStatus::kWarn;
      problems.push_back("CUDA_VISIBLE_DEVICES='" + *cvd + "' hides all " + std::to_string(nvml_n) + " GPUs from CUDA");
      fixes.push_back("unset CUDA_VISIBLE_DEVICES (or list the GPUs to use)");
    } else {
      status = CheckStatus::kFail;
      problems.push_back(StrCat("NVML sees ", nvml_n, " GPU(s) but CUDA cannot use them: ", gpu.cuda_error));
      fixes.push_back(gpu.cuda_error.find("802") != std::string::npos ? "systemctl enable --now nvidia-fabricmanager"
                      : gpu.cuda_error.find("not found") != std::string::npos
                          ? "install the driver's user-space libraries (containers: --gpus all / nvidia-container-toolkit)"
                          : "nvidia-smi; dmesg | grep -i -E 'NVRM|Xid'; reboot if the driver was upgraded without one");
    }
  } else {
    const int cuda_n = static_cast<int>(gpu.can_access_peer.size());
    ev.push_back(StrCat("CUDA: cuDeviceGetCount = ", cuda_n));
    if (want.count && cuda_n < *want.count) {
      status = cvd ? std::max(status, CheckStatus::kWarn) : CheckStatus::kFail;
      problems.push_back(StrCat("CUDA sees ", cuda_n, " GPU(s) where ", cvd ? "CUDA_VISIBLE_DEVICES selects " : "NVML lists ",
                                *want.count, ": a GPU the driver lists is unusable by CUDA"));
      fixes.push_back("nvidia-smi -q | grep -i -E 'retired|pending|Xid'; dmesg | grep -i Xid; reset the GPU (nvidia-smi -r -i N) or "
                      "reboot; drain the node if it persists");
    } else if (want.count && cuda_n > *want.count) {
      status = std::max(status, CheckStatus::kWarn);
      problems.push_back(StrCat("CUDA sees ", cuda_n, " GPU(s), more than the ", *want.count, " expected from ",
                                cvd ? "CUDA_VISIBLE_DEVICES" : "NVML"));
      fixes.push_back("compare nvidia-smi -L with the job's CUDA_VISIBLE_DEVICES");
    } else if (!want.note.empty() && want.count) {
      status = std::max(status, CheckStatus::kWarn);
      problems.push_back(StrCat("CUDA_VISIBLE_DEVICES=", *cvd, ": ", want.note, " (CUDA sees ", cuda_n, ")"));
      fixes.push_back(StrCat("export CUDA_VISIBLE_DEVICES with indices 0..", nvml_n - 1, " or GPU UUIDs from nvidia-smi -L"));
    }
    if (problems.empty())
      return Outcome(CheckStatus::kPass,
                  StrCat(cuda_n, " GPU(s) visible to CUDA", cvd ? " (CUDA_VISIBLE_DEVICES=" + *cvd + ")" : "", " of ", nvml_n,
                         " NVML lists; ", versions),
                  ev);
  }
  return Outcome(status, Join(problems, "; ") + "; " + versions, ev, Join(fixes, "; "));
}

}  // namespace

void RegisterGpuChecks(CheckRegistry& r) {
  r.Add({{"gpu.visibility", "NVML, CUDA and CUDA_VISIBLE_DEVICES agree on the GPUs", "gpu"}, Visibility});
  r.Add({{"gpu.nvlink", "NVLinks active and symmetric on every GPU", "gpu"}, NvLink});
  r.Add({{"gpu.ecc", "ECC on, no pending or failed row remapping", "gpu"}, Ecc});
  r.Add({{"gpu.clocks", "No hardware/thermal clock slowdown", "gpu"}, Clocks});
}

}  // namespace commkit::diagnostics
