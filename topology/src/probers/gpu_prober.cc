// NVML and CUDA driver facts through dlopen (no nvml.h / cuda.h: only the few signatures we call).
#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

#include "commkit/common/dynamic_library.h"
#include "commkit/common/strings.h"
#include "commkit/topology/probe.h"
#include "probers/probe_steps.h"

namespace commkit::topology {
namespace {

using json = nlohmann::json;
using NvmlDevice = void*;
using NvmlReturn = int;  // NVML_SUCCESS = 0

struct NvmlPciInfo {  // nvmlPciInfo_t (v3 layout)
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr int kNvLinkMaxLinks = 18;

const char* P2pStatusText(int s) {
  switch (s) {
    case 0: return "OK";
    case 1: return "CNS";  // chipset not supported
    case 2: return "GNS";  // GPU not supported
    case 3: return "TNS";  // IOH topology not supported
    case 4: return "DR";   // disabled by regkey
    case 5: return "NS";
    default: return "U";
  }
}

template <typename F>
F* Fn(const DynamicLibrary& lib, const char* name) {
  auto f = lib.Function<F>(name);
  return f.ok() ? *f : nullptr;
}

}  // namespace

std::string NvmlFact() {
  json j;
  auto lib = DynamicLibrary::Open({"libnvidia-ml.so.1", "libnvidia-ml.so"});
  if (!lib.ok()) {
    j["available"] = false;
    j["error"] = "libnvidia-ml.so.1 not found";
    j["detail"] = lib.status().message();
    return j.dump();
  }
  auto init = Fn<NvmlReturn()>(*lib, "nvmlInit_v2");
  auto shutdown = Fn<NvmlReturn()>(*lib, "nvmlShutdown");
  auto count_fn = Fn<NvmlReturn(unsigned*)>(*lib, "nvmlDeviceGetCount_v2");
  auto handle_fn = Fn<NvmlReturn(unsigned, NvmlDevice*)>(*lib, "nvmlDeviceGetHandleByIndex_v2");
  if (!init || !count_fn || !handle_fn) {
    j["available"] = false;
    j["error"] = "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetCount_v2 (driver too old?)";
    return j.dump();
  }
  if (int rc = init(); rc != 0) {
    j["available"] = false;
    j["error"] = StrCat("nvmlInit_v2 failed with NVML error ", rc,
                        rc == 18 ? " (driver/library version mismatch: reboot or reload the driver)" : "");
    return j.dump();
  }
  j["available"] = true;
  char buf[256] = {};
  if (auto f = Fn<NvmlReturn(char*, unsigned)>(*lib, "nvmlSystemGetDriverVersion"); f && f(buf, sizeof(buf)) == 0)
    j["driver_version"] = buf;
  int cuda_version = 0;
  if (auto f = Fn<NvmlReturn(int*)>(*lib, "nvmlSystemGetCudaDriverVersion_v2"); f && f(&cuda_version) == 0)
    j["cuda_driver_version"] = cuda_version;
  unsigned count = 0;
  count_fn(&count);
  std::vector<NvmlDevice> devs(count, nullptr);
  json gpus = json::array();
  auto name_fn = Fn<NvmlReturn(NvmlDevice, char*, unsigned)>(*lib, "nvmlDeviceGetName");
  auto uuid_fn = Fn<NvmlReturn(NvmlDevice, char*, unsigned)>(*lib, "nvmlDeviceGetUUID");
  auto pci_fn = Fn<NvmlReturn(NvmlDevice, NvmlPciInfo*)>(*lib, "nvmlDeviceGetPciInfo_v3");
  auto mem_fn = Fn<NvmlReturn(NvmlDevice, NvmlMemory*)>(*lib, "nvmlDeviceGetMemoryInfo");
  auto cc_fn = Fn<NvmlReturn(NvmlDevice, int*, int*)>(*lib, "nvmlDeviceGetCudaComputeCapability");
  auto pm_fn = Fn<NvmlReturn(NvmlDevice, int*)>(*lib, "nvmlDeviceGetPersistenceMode");
  auto ecc_fn = Fn<NvmlReturn(NvmlDevice, int*, int*)>(*lib, "nvmlDeviceGetEccMode");
  auto remap_fn = Fn<NvmlReturn(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*)>(*lib, "nvmlDeviceGetRemappedRows");
  auto reasons_fn = Fn<NvmlReturn(NvmlDevice, unsigned long long*)>(*lib, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!reasons_fn) reasons_fn = Fn<NvmlReturn(NvmlDevice, unsigned long long*)>(*lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
  auto pcie_fn = [&](const char* name) { return Fn<NvmlReturn(NvmlDevice, unsigned*)>(*lib, name); };
  auto nvl_state_fn = Fn<NvmlReturn(NvmlDevice, unsigned, int*)>(*lib, "nvmlDeviceGetNvLinkState");
  auto nvl_remote_fn = Fn<NvmlReturn(NvmlDevice, unsigned, NvmlPciInfo*)>(*lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto p2p_fn = Fn<NvmlReturn(NvmlDevice, NvmlDevice, int, int*)>(*lib, "nvmlDeviceGetP2PStatus");
  for (unsigned i = 0; i < count; ++i) {
    json g;
    g["index"] = i;
    if (handle_fn(i, &devs[i]) != 0) {
      g["error"] = "nvmlDeviceGetHandleByIndex_v2 failed";
      gpus.push_back(g);
      continue;
    }
    NvmlDevice d = devs[i];
    if (name_fn && name_fn(d, buf, sizeof(buf)) == 0) g["name"] = buf;
    if (uuid_fn && uuid_fn(d, buf, sizeof(buf)) == 0) g["uuid"] = buf;
    NvmlPciInfo pci{};
    if (pci_fn && pci_fn(d, &pci) == 0) g["bus_id"] = std::string(pci.bus_id, strnlen(pci.bus_id, sizeof(pci.bus_id)));
    NvmlMemory mem{};
    if (mem_fn && mem_fn(d, &mem) == 0) g["memory_bytes"] = mem.total;
    int major = 0, minor = 0;
    if (cc_fn && cc_fn(d, &major, &minor) == 0) g["sm"] = major * 10 + minor;
    int a = 0, b = 0;
    if (pm_fn && pm_fn(d, &a) == 0) g["persistence_mode"] = a != 0;
    if (ecc_fn && ecc_fn(d, &a, &b) == 0) g["ecc_enabled"] = a != 0;
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    if (remap_fn && remap_fn(d, &corr, &unc, &pending, &failure) == 0) {
      g["remapped_rows_uncorrectable"] = unc;
      g["remap_pending"] = pending != 0;
      g["remap_failure"] = failure != 0;
    }
    unsigned long long reasons = 0;
    if (reasons_fn && reasons_fn(d, &reasons) == 0) g["clocks_event_reasons"] = reasons;
    const char* pcie_names[][2] = {{"pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"},
                                   {"pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"},
                                   {"pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"},
                                   {"pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth"}};
    for (auto& [key, fn_name] : pcie_names) {
      unsigned v = 0;
      if (auto f = pcie_fn(fn_name); f && f(d, &v) == 0) g[key] = v;
    }
    // nvmlDeviceGetNvLinkState answers NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT for link indices
    // this GPU does not have: only indices it answers for are recorded, active or not.
    json links = json::array(), states = json::array();
    for (unsigned l = 0; nvl_state_fn && l < kNvLinkMaxLinks; ++l) {
      int active = 0;
      if (nvl_state_fn(d, l, &active) != 0) continue;
      json link = {{"link", l}, {"active", active != 0}};
      if (active) {
        NvmlPciInfo remote{};
        std::string remote_bus;
        if (nvl_remote_fn && nvl_remote_fn(d, l, &remote) == 0)
          remote_bus = std::string(remote.bus_id, strnlen(remote.bus_id, sizeof(remote.bus_id)));
        links.push_back(remote_bus);
        link["remote_bus_id"] = remote_bus;
      }
      states.push_back(std::move(link));
    }
    g["nvlink_remote_bus_ids"] = links;
    g["nvlinks"] = states;
    gpus.push_back(g);
  }
  j["gpus"] = gpus;
  json p2p = json::array();
  for (unsigned i = 0; i < count; ++i) {
    json row = json::array();
    for (unsigned k = 0; k < count; ++k) {
      int s = 6;
      if (i == k) row.push_back("X");
      else if (p2p_fn && devs[i] && devs[k] && p2p_fn(devs[i], devs[k], /*NVML_P2P_CAPS_INDEX_READ=*/0, &s) == 0)
        row.push_back(P2pStatusText(s));
      else row.push_back("U");
    }
    p2p.push_back(row);
  }
  j["p2p_read"] = p2p;
  if (shutdown) shutdown();
  return j.dump();
}

std::string CudaFact() {
  json j;
  auto lib = DynamicLibrary::Open({"libcuda.so.1", "libcuda.so"});
  if (!lib.ok()) {
    j["available"] = false;
    j["error"] = "libcuda.so.1 not found";
    return j.dump();
  }
  auto init = Fn<int(unsigned)>(*lib, "cuInit");
  auto count_fn = Fn<int(int*)>(*lib, "cuDeviceGetCount");
  auto get_fn = Fn<int(int*, int)>(*lib, "cuDeviceGet");
  auto peer_fn = Fn<int(int*, int, int)>(*lib, "cuDeviceCanAccessPeer");
  if (!init || !count_fn || !get_fn || !peer_fn) {
    j["available"] = false;
    j["error"] = "libcuda.so.1 lacks cuInit/cuDeviceGetCount/cuDeviceCanAccessPeer";
    return j.dump();
  }
  if (int rc = init(0); rc != 0) {
    j["available"] = false;
    j["error"] = StrCat("cuInit failed with CUDA error ", rc,
                        rc == 100 ? " (no CUDA-capable device)" : rc == 802 ? " (system not yet initialized: is nvidia-fabricmanager running?)" : "");
    lib->Leak();
    return j.dump();
  }
  lib->Leak();  // libcuda must stay mapped once initialised
  int count = 0;
  count_fn(&count);
  j["available"] = true;
  j["device_count"] = count;
  json m = json::array();
  for (int i = 0; i < count; ++i) {
    json row = json::array();
    int di = 0;
    get_fn(&di, i);
    for (int k = 0; k < count; ++k) {
      int dk = 0, can = 0;
      get_fn(&dk, k);
      row.push_back(i != k && peer_fn(&can, di, dk) == 0 && can != 0);
    }
    m.push_back(row);
  }
  j["can_access_peer"] = m;
  return j.dump();
}

Status ParseNvmlFact(std::string_view text, GpuRuntimeInfo& out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("nvml fact: not a JSON object");
  try {
    out.nvml_available = j.value("available", false);
    out.nvml_error = j.value("error", "");
    out.driver_version = j.value("driver_version", "");
    out.cuda_driver_version = j.value("cuda_driver_version", 0);
    out.gpus.clear();
    for (const auto& g : j.value("gpus", json::array())) {
      NvmlGpu gpu;
      gpu.index = g.value("index", 0);
      gpu.name = g.value("name", "");
      gpu.uuid = g.value("uuid", "");
      gpu.bus_id = g.value("bus_id", "");
      gpu.memory_bytes = g.value("memory_bytes", std::uint64_t{0});
      gpu.sm = g.value("sm", 0);
      if (g.contains("persistence_mode")) gpu.persistence_mode = g["persistence_mode"].get<bool>();
      if (g.contains("ecc_enabled")) gpu.ecc_enabled = g["ecc_enabled"].get<bool>();
      if (g.contains("remapped_rows_uncorrectable")) gpu.remapped_rows_uncorrectable = g["remapped_rows_uncorrectable"].get<unsigned>();
      if (g.contains("remap_pending")) gpu.remap_pending = g["remap_pending"].get<bool>();
      if (g.contains("remap_failure")) gpu.remap_failure = g["remap_failure"].get<bool>();
      if (g.contains("clocks_event_reasons")) gpu.clocks_event_reasons = g["clocks_event_reasons"].get<std::uint64_t>();
      gpu.pcie_gen = g.value("pcie_gen", 0);
      gpu.pcie_width = g.value("pcie_width", 0);
      gpu.pcie_max_gen = g.value("pcie_max_gen", 0);
      gpu.pcie_max_width = g.value("pcie_max_width", 0);
      gpu.nvlink_remote_bus_ids = g.value("nvlink_remote_bus_ids", std::vector<std::string>{});
      for (const auto& l : g.value("nvlinks", json::array())) {
        NvmlGpu::NvLink link;
        link.link = l.value("link", 0);
        link.active = l.value("active", false);
        link.remote_bus_id = l.value("remote_bus_id", "");
        gpu.nvlinks.push_back(std::move(link));
      }
      out.gpus.push_back(std::move(gpu));
    }
    out.p2p_read = j.value("p2p_read", std::vector<std::vector<std::string>>{});
  } catch (const json::exception& e) {
    return Status::DataLoss(StrCat("nvml fact: wrong field type: ", e.what()));
  }
  return Status::Ok();
}

Status ParseCudaFact(std::string_view text, GpuRuntimeInfo& out) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("cuda fact: not a JSON object");
  try {
    out.cuda_available = j.value("available", false);
    out.cuda_error = j.value("error", "");
    out.can_access_peer = j.value("can_access_peer", std::vector<std::vector<bool>>{});
  } catch (const json::exception& e) {
    return Status::DataLoss(StrCat("cuda fact: wrong field type: ", e.what()));
  }
  return Status::Ok();
}

bool GpuRuntimeInfo::AnyPairWithoutP2p() const {
  for (std::size_t i = 0; i < p2p_read.size(); ++i)
    for (std::size_t k = 0; k < p2p_read[i].size(); ++k)
      if (i != k && p2p_read[i][k] != "OK" && p2p_read[i][k] != "X") return true;
  for (std::size_t i = 0; i < can_access_peer.size(); ++i)
    for (std::size_t k = 0; k < can_access_peer[i].size(); ++k)
      if (i != k && !can_access_peer[i][k]) return true;
  return false;
}

// NVML's answer (fact "nvml"): GPUs, driver, NVLinks, P2P status. Before the pci step, which names
// GPUs from it.
void ProbeNvmlFact(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  auto fact = view.Fact("nvml", [] { return Result<std::string>(NvmlFact()); });
  if (!fact.ok()) {
    ctx.AddStatus("nvml", FactState(fact.status()), FactDetail(fact.status()));
  } else if (Status s = ParseNvmlFact(*fact, r.gpu); !s.ok()) {
    ctx.AddStatus("nvml", ProberState::kFailed, s.ToString());
  } else if (!r.gpu.nvml_available) {
    ctx.AddStatus("nvml", ProberState::kSkipped, StrCat("skipped: ", r.gpu.nvml_error));
  } else {
    ctx.AddStatus("nvml", ProberState::kOk, StrCat(r.gpu.gpus.size(), " GPU(s), driver ", r.gpu.driver_version));
  }
}

// The CUDA driver's answer (fact "cuda"): peer access between devices.
void ProbeCudaFact(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  auto fact = view.Fact("cuda", [] { return Result<std::string>(CudaFact()); });
  if (!fact.ok()) {
    ctx.AddStatus("cuda", FactState(fact.status()), FactDetail(fact.status()));
  } else if (Status s = ParseCudaFact(*fact, r.gpu); !s.ok()) {
    ctx.AddStatus("cuda", ProberState::kFailed, s.ToString());
  } else if (!r.gpu.cuda_available) {
    ctx.AddStatus("cuda", ProberState::kSkipped, StrCat("skipped: ", r.gpu.cuda_error));
  } else {
    ctx.AddStatus("cuda", ProberState::kOk, StrCat(r.gpu.can_access_peer.size(), " device(s)"));
  }
}

// After the pci step: the GPUs NVML reported that sysfs did not show, NVLink bundles and P2P overrides.
void AddGpuRuntimeLinks(ProbeContext& ctx) {
  ProbeReport& r = ctx.report;
  Topology& topo = ctx.report.topology;
  std::map<std::string, NodeId>& node_of_bdf = ctx.node_of_bdf;
  // GPUs NVML sees but sysfs did not show (containers with a masked /sys): add them under the CPU.
  for (const auto& g : r.gpu.gpus) {
    if (!g.bus_id.empty() && node_of_bdf.count(CanonicalBusId(g.bus_id))) continue;
    Node n;
    n.kind = NodeKind::kGpu;
    n.parent = ctx.FirstCpu();
    n.pci.bus_id = CanonicalBusId(g.bus_id);
    n.gpu.index = static_cast<int>(topo.GpuCount());
    n.gpu.nvml_index = g.index;
    n.gpu.name = g.name;
    n.gpu.uuid = g.uuid;
    n.gpu.sm = g.sm;
    n.gpu.memory_bytes = g.memory_bytes;
    n.label = StrCat("GPU", n.gpu.index);
    NodeId id = topo.AddNode(std::move(n));
    if (!g.bus_id.empty()) node_of_bdf[CanonicalBusId(g.bus_id)] = id;
  }
  // NVLinks from NVML: count links per remote.
  for (const auto& g : r.gpu.gpus) {
    auto self = node_of_bdf.find(CanonicalBusId(g.bus_id));
    if (self == node_of_bdf.end()) continue;
    std::map<std::string, int> per_remote;
    for (const auto& rb : g.nvlink_remote_bus_ids) per_remote[CanonicalBusId(rb)]++;
    for (const auto& [remote, count] : per_remote) {
      auto other = node_of_bdf.find(remote);
      if (other == node_of_bdf.end() || other->second == self->second) continue;
      const bool to_gpu = topo.node(other->second).kind == NodeKind::kGpu;
      if (to_gpu && other->second < self->second) continue;  // add GPU-GPU bundles once
      Link l;
      l.kind = LinkKind::kNvLink;
      l.a = self->second;
      l.b = other->second;
      l.count = count;
      l.nvlink_version = NvLinkVersionForSm(g.sm);
      if (!to_gpu) l.target_class = "0x068000";
      topo.AddLink(l);
    }
  }
  // P2P overrides from NVML (by NVML index -> node).
  for (std::size_t i = 0; i < r.gpu.p2p_read.size() && i < r.gpu.gpus.size(); ++i) {
    for (std::size_t k = 0; k < r.gpu.p2p_read[i].size() && k < r.gpu.gpus.size(); ++k) {
      if (i == k) continue;
      auto a = node_of_bdf.find(CanonicalBusId(r.gpu.gpus[i].bus_id));
      auto b = node_of_bdf.find(CanonicalBusId(r.gpu.gpus[k].bus_id));
      if (a == node_of_bdf.end() || b == node_of_bdf.end()) continue;
      topo.AddP2pOverride({a->second, b->second, 'r', r.gpu.p2p_read[i][k]});
    }
  }
}

}  // namespace commkit::topology
