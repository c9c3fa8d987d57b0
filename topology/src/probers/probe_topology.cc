// ProbeTopology: runs the probers in order (probe_steps.h: each source's step lives beside its prober)
// and puts the report's device locality in topology order.
#include <string>
#include <utility>
#include <vector>

#include "commkit/common/strings.h"
#include "commkit/topology/probe.h"
#include "probers/probe_steps.h"

namespace commkit::topology {
namespace {

// One locality entry per GPU/NIC/NVSwitch, in topology order, with the labels the probers settled on.
void OrderLocality(ProbeReport& r) {
  const Topology& topo = r.topology;
  std::vector<DeviceLocality> ordered;
  for (const Node& n : topo.nodes()) {
    if (n.kind != NodeKind::kGpu && n.kind != NodeKind::kNic && n.kind != NodeKind::kNvSwitch) continue;
    if (n.pci.bus_id.empty()) continue;
    DeviceLocality loc;
    if (const DeviceLocality* known = r.LocalityOf(n.pci.bus_id)) loc = *known;
    loc.bus_id = n.pci.bus_id;
    loc.label = n.label;
    if (loc.cpulist.empty() && loc.numa_id >= 0)
      if (const NumaNodeInfo* numa = r.Numa(loc.numa_id)) loc.cpulist = numa->cpulist;
    ordered.push_back(std::move(loc));
  }
  r.locality = std::move(ordered);
}

}  // namespace

void ProbeContext::AddStatus(std::string name, ProberState state, std::string detail) {
  if (state != ProberState::kOk) report.warnings.push_back(StrCat(name, ": ", detail));
  report.probers.push_back({std::move(name), state, std::move(detail)});
}

ProberState FactState(const Status& s) { return s.code() == StatusCode::kNotFound ? ProberState::kSkipped : ProberState::kFailed; }
std::string FactDetail(const Status& s) {
  return s.code() == StatusCode::kNotFound ? StrCat("skipped: ", s.message()) : s.ToString();
}

std::string Attr(const SystemView& v, const std::string& path) {
  auto r = v.ReadAttr(path);
  return r.ok() ? *r : std::string();
}

int ToInt(const std::string& s, int fallback) {
  auto v = ParseInt(s);
  return v ? static_cast<int>(*v) : fallback;
}

bool LooksLikeBdf(std::string_view s) {
  return s.size() == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.';
}

std::string_view ToString(ProberState s) {
  switch (s) {
    case ProberState::kOk: return "ok";
    case ProberState::kSkipped: return "skipped";
    case ProberState::kFailed: return "failed";
  }
  return "unknown";
}

bool GidEntry::ipv4_mapped() const {
  std::string g = ToLower(gid);
  std::string hex;
  for (char c : g)
    if (c != ':') hex += c;
  return hex.size() == 32 && hex.compare(0, 20, "00000000000000000000") == 0 && hex.compare(20, 4, "ffff") == 0;
}

const ProberStatus* ProbeReport::Prober(std::string_view name) const {
  for (const auto& p : probers)
    if (p.name == name) return &p;
  return nullptr;
}

const DeviceLocality* ProbeReport::LocalityOf(std::string_view bus_id) const {
  const std::string canon = CanonicalBusId(bus_id);
  for (const auto& l : locality)
    if (l.bus_id == canon) return &l;
  return nullptr;
}

const NumaNodeInfo* ProbeReport::Numa(int os_index) const {
  for (const auto& n : numa)
    if (n.os_index == os_index) return &n;
  return nullptr;
}

Result<ProbeReport> ProbeTopology(const SystemView& view, const ProbeOptions& options) {
  ProbeReport r;
  Topology& topo = r.topology;
  topo.metadata().source = TopologySource::kProbed;
  topo.metadata().source_path = view.root().string();
  {
    auto host = view.ReadAttr("/proc/sys/kernel/hostname");
    if (host.ok()) topo.metadata().hostname = *host;
  }
  ProbeContext ctx{view, r, {}, {}};
  // GPU runtime facts first: the PCI pass names GPUs from them.
  if (options.nvml) ProbeNvmlFact(ctx);
  if (options.cuda) ProbeCudaFact(ctx);
  if (options.pci) {
    ProbeCpusAndNuma(ctx);
    ProbePciTree(ctx);
  }
  AddGpuRuntimeLinks(ctx);
  if (options.network) ProbeNetworkInterfaces(ctx);
  if (options.rdma) ProbeRdmaSysfs(ctx);
  // Library facts: port attributes and GID types where sysfs was silent, EFA as libfabric sees it,
  // and NUMA/package/CPU sets and device locality sysfs lacked.
  if (options.verbs) ProbeVerbsFact(ctx);
  if (options.libfabric) ProbeLibfabricFact(ctx);
  if (options.hwloc) ProbeHwlocFacts(ctx);
  OrderLocality(r);
  if (Status s = topo.Validate(); !s.ok()) r.warnings.push_back(StrCat("probed topology is inconsistent: ", s.message()));
  return r;
}

}  // namespace commkit::topology
