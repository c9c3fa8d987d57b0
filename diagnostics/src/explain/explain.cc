// Log explainer. Signatures come from the failure catalog (/work/shared/notes/diagnostics-anchors.md)
// and the labelled corpus. Confidence policy: kHigh only when the log alone proves the cause (e.g.
// ENOSPC while extending /dev/shm, or the interface NCCL was told to use is shown not to match);
// signatures whose cause threads did not settle get kMedium (the usual cause, stated as such) or kLow.
#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics {

const char* ToString(Confidence c) {
  switch (c) {
    case Confidence::kNone: return "none";
    case Confidence::kLow: return "low";
    case Confidence::kMedium: return "medium";
    case Confidence::kHigh: return "high";
  }
  return "none";
}

namespace {

struct Rule {
  const char* signature;
  const char* pattern;  // ECMAScript regex, searched per line (icase)
  Confidence confidence;
  const char* cause;
  const char* fix;
};

// Order matters only for ties (same confidence, same first line).
const Rule kRules[] = {
    {"shm.enospc", R"(failed to extend /dev/shm.*No space left on device|/dev/shm.*error: No space left on device)",
     Confidence::kHigh,
     "/dev/shm is too small for NCCL's SHM transport (container default 64 MB; each peer pair needs a ~9.6 MB segment): "
     "ENOSPC while extending the segment",
     "Enlarge /dev/shm: docker --shm-size=1g or --ipc=host; Kubernetes: emptyDir {medium: Memory} mounted at /dev/shm; "
     "workaround NCCL_SHM_DISABLE=1"},
    {"socket.no_interface", R"(no socket interface found)", Confidence::kMedium,
     "No network interface matches NCCL_SOCKET_IFNAME (commonly a hard-coded NCCL_SOCKET_IFNAME=eth0 on a host without eth0)",
     "Set NCCL_SOCKET_IFNAME to an interface listed by `ip -br addr` (or unset it); run `gpudoctor --only env.nccl` on the node"},
    {"nvls.invalid_argument", R"(transport/nvls\.cc.*Cuda failure.*invalid argument)", Confidence::kMedium,
     "NVLS (NVLink SHARP) multicast allocation failed; known cause: nvidia-fabricmanager was stopped/restarted without a GPU "
     "reset",
     "Reboot the node (or reset all GPUs between fabric manager stop/start per the Fabric Manager guide); workaround "
     "NCCL_NVLS_ENABLE=0"},
    {"cuda.system_not_ready", R"(system not yet initialized|cudaErrorSystemNotReady|\b802\b.*not yet initialized)",
     Confidence::kMedium,
     "CUDA reports cudaErrorSystemNotReady (802): on NVSwitch systems this usually means nvidia-fabricmanager is not running",
     "systemctl enable --now nvidia-fabricmanager (version matching the driver); check `nvidia-smi -q | grep -i fabric`"},
    {"p2p.peer_access", R"(217 peer access is not supported|cudaIpcOpenMemHandle|peer access is not supported)",
     Confidence::kMedium,
     "CUDA peer access (P2P/IPC) is not supported between these GPUs (PCIe topology, ACS/IOMMU, virtualised GPUs) but a P2P "
     "path was used",
     "Check `nvidia-smi topo -p2p r`; NCCL: NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL=LOC); TensorRT-LLM: build without "
     "use_custom_all_reduce"},
    {"p2p.peer_access_warning", R"(peer access Device \d+ is not available)", Confidence::kLow,
     "Warnings that GPUs have no peer access; harmless unless a P2P-only path (e.g. custom all-reduce) is used",
     "Only if a later error follows: disable the P2P-only feature (use_custom_all_reduce=false) or NCCL_P2P_DISABLE=1"},
    {"ib.create_qp", R"(ibv_create_qp failed)", Confidence::kMedium,
     "ibv_create_qp failed: usually the locked-memory limit (ulimit -l) inside the job is too low (e.g. 64 KiB under "
     "srun/containers)",
     "Check `srun bash -c 'ulimit -l'`; raise memlock: limits.conf memlock unlimited, Slurm PropagateResourceLimits / "
     "LimitMEMLOCK=infinity, docker --ulimit memlock=-1"},
    {"ib.create_cq", R"(ibv_create_cq failed)", Confidence::kLow,
     "ibv_create_cq failed: possibly the locked-memory limit or exhausted HCA resources (not settled from the log alone)",
     "Check `ulimit -l` in the job (should be unlimited) and `ibv_devinfo`; raise memlock as for ibv_create_qp"},
    {"ib.completion_error", R"(Got completion from peer.*status=12.*vendor err 129|status=12.*vendor err 129)",
     Confidence::kLow,
     "IB/RoCE transport retry exceeded (status 12, vendor err 129): packets do not reach the peer; on RoCE frequently a wrong "
     "GID index / address family (e.g. IPv6 GID) or lossy fabric",
     "Try NCCL_IB_GID_INDEX=3 (RoCEv2 IPv4; check `show_gids`), NCCL_IB_ADDR_FAMILY=AF_INET; check PFC/ECN on the switches"},
    {"ib.gdr_disabled", R"(GPU Direct RDMA Disabled for HCA)", Confidence::kMedium,
     "NCCL did not detect GPUDirect RDMA support: nvidia_peermem not loaded, or NCCL <= 2.22.3 only checks the old nv_peer_mem "
     "module path",
     "modprobe nvidia_peermem; use NCCL >= 2.23.4 (detects nvidia_peermem) or dma-buf (NCCL_DMABUF_ENABLE=1, kernel >= 5.12)"},
    {"efa.no_provider", R"(Couldn't find any optimal provider|NET/OFI.*No .*provider)", Confidence::kMedium,
     "aws-ofi-nccl found no usable libfabric EFA provider (EFA devices/libfabric not visible or wrong libfabric)",
     "Check `fi_info -p efa`; install the EFA installer's libfabric and pass /dev/infiniband/uverbs* into the container"},
    {"efa.fi_getinfo_empty", R"(fi_getinfo.*provider efa output empty list|fi_getinfo.*empty list)", Confidence::kMedium,
     "libfabric's EFA provider returned no devices: /dev/infiniband is usually not exposed to the container",
     "Pass the EFA devices into the container (--device=/dev/infiniband/uverbs0 ..., k8s: EFA device plugin); check "
     "`fi_info -p efa` inside it"},
    {"topo.attribute_missing", R"(Attribute \w+ of node \w+ not found)", Confidence::kMedium,
     "NCCL's topology XML (e.g. a static NCCL_TOPO_FILE such as p5.48xl-topo.xml injected by aws-ofi-nccl) lacks attributes "
     "for the GPUs in use",
     "Unset NCCL_TOPO_FILE or upgrade aws-ofi-nccl >= 1.11 (generates the topology dynamically)"},
    {"socket.veth_interface", R"((NET/Socket|Bootstrap) : Using .*\b(veth[0-9a-f]+|docker\d|virbr\d|lo):)", Confidence::kMedium,
     "NCCL selected a virtual/loopback interface (veth/docker/virbr/lo) that peers cannot reach",
     "Set NCCL_SOCKET_IFNAME to the routable interface (e.g. NCCL_SOCKET_IFNAME=eno1) or exclude: "
     "NCCL_SOCKET_IFNAME=^docker,veth,lo,virbr"},
    {"socket.connect_failed",
     R"(Connect to .* failed : (Software caused connection abort|Connection refused|No route to host)|connect.*(Connection timed out|No route to host|Connection refused))",
     Confidence::kMedium,
     "Peers cannot open TCP connections to each other (firewall, wrong interface/route, or the peer died first)",
     "Test with `nc -l <port>` / `nc <ip> <port>` between nodes; open the ports or the NCCL interface in the firewall; set "
     "NCCL_SOCKET_IFNAME to the interface both nodes route on"},
    {"watchdog.timeout", R"(Watchdog caught collective operation timeout)", Confidence::kLow,
     "A collective did not complete within the process-group timeout: a rank is stuck, dead, or ranks issued different "
     "collectives (desync)",
     "Find the rank that did not reach this SeqNum: rerun with TORCH_NCCL_TRACE_BUFFER_SIZE=20000 "
     "TORCH_NCCL_DUMP_ON_TIMEOUT=1 (flight recorder), TORCH_DISTRIBUTED_DEBUG=DETAIL, NCCL_DEBUG=INFO; check the other "
     "ranks' logs and `py-spy dump` on the hung ranks"},
    {"shm.cuda_invalid_argument", R"(shmutils\.cc.*Cuda failure 'invalid argument')", Confidence::kLow,
     "cudaHostRegister of the /dev/shm segment failed ('invalid argument'); cause not determined from the log",
     "Workaround: NCCL_SHM_DISABLE=1; check /dev/shm size and free space"},
    {"shm.attach_missing", R"(attaching to shared memory segment.*No such file or directory)", Confidence::kLow,
     "A rank could not attach to a peer's /dev/shm segment (it vanished or ranks see different /dev/shm namespaces)",
     "Make all local ranks share /dev/shm (same container / --ipc=host); try another NCCL version; workaround "
     "NCCL_SHM_DISABLE=1"},
    {"ib.no_device", R"(NET/IB : No device found)", Confidence::kLow,
     "NCCL's IB transport found no RDMA device (none present, not visible in the container, or plugin mismatch): falls back "
     "to sockets",
     "Check `ibv_devices`; pass /dev/infiniband into the container; check NCCL_IB_HCA and the net plugin (NCCL_NET_PLUGIN)"},
};

bool IsEnvelope(std::string_view line) {
  static const char* kEnvelopes[] = {"ncclInternalError", "unhandled system error", "internal error - please report",
                                     "unhandled cuda error", "Test NCCL failure", "Test failure", "NCCL error in:",
                                     "DistBackendError", "ncclSystemError", "ncclUnhandledCudaError"};
  for (const char* e : kEnvelopes)
    if (line.find(e) != std::string_view::npos) return true;
  return false;
}

template <typename T>
void AddUnique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

Explanation ExplainLog(std::string_view text) {
  Explanation ex;
  std::vector<std::string> lines = Split(text, '\n');
  static const std::regex kVersion(R"(NCCL version (\d+\.\d+\.\d+))");
  static const std::regex kHost(R"(([A-Za-z0-9_.<>-]+):(\d+):(\d+) \[(\d+)\])");
  static const std::regex kVia(R"(via (P2P|SHM|NET/IB|NET/Socket|NET/OFI|NET/AWS Libfabric|COLLNET))");
  static const std::regex kNetwork(R"(Using (?:network|internal Network) (\w+))");
  static const std::regex kIface(R"((?:NET/Socket|Bootstrap|NET) : Using (?:interface )?(.*))");
  static const std::regex kError(R"(\bWARN\b|\berror\b|\bfailed\b|\bfailure\b)", std::regex::icase);
  std::vector<std::regex> compiled;
  for (const Rule& r : kRules) compiled.emplace_back(r.pattern, std::regex::icase);
  std::vector<Diagnosis> found(std::size(kRules));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string line = lines[i];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    int lineno = static_cast<int>(i + 1);
    std::smatch m;
    if (std::regex_search(line, m, kVersion)) AddUnique(ex.facts.nccl_versions, m[1].str());
    if (std::regex_search(line, m, kHost)) {
      AddUnique(ex.facts.hosts, m[1].str());
      AddUnique(ex.facts.ranks, static_cast<int>(ParseInt(m[4].str()).value_or(-1)));
    }
    if (std::regex_search(line, m, kVia)) {
      std::string t = m[1].str();
      if (StartsWith(t, "NET/")) t = t.substr(4);
      AddUnique(ex.facts.transports, t);
    }
    if (std::regex_search(line, m, kNetwork)) AddUnique(ex.facts.transports, m[1].str());
    if (std::regex_search(line, m, kIface)) AddUnique(ex.facts.interfaces, std::string(Trim(m[1].str())));
    if (ex.facts.first_error.line == 0 && std::regex_search(line, kError) && !IsEnvelope(line) &&
        line.find(" -> ") == std::string::npos)
      ex.facts.first_error = {lineno, line};
    for (std::size_t r = 0; r < std::size(kRules); ++r) {
      if (!std::regex_search(line, compiled[r])) continue;
      Diagnosis& d = found[r];
      if (d.evidence.empty()) {
        d.signature = kRules[r].signature;
        d.cause = kRules[r].cause;
        d.fix = kRules[r].fix;
        d.confidence = kRules[r].confidence;
      }
      if (d.evidence.size() < 5) d.evidence.push_back({lineno, line});
    }
  }
  // Upgrade: the interface mismatch is proven when the log also shows what NCCL_SOCKET_IFNAME was set to.
  static const std::regex kIfnameSet(R"(NCCL_SOCKET_IFNAME set by environment to (\S+))");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (std::regex_search(lines[i], m, kIfnameSet)) {
      for (Diagnosis& d : found)
        if (d.signature == "socket.no_interface") {
          d.confidence = Confidence::kHigh;
          d.cause = "NCCL_SOCKET_IFNAME=" + m[1].str() + " matches no interface on this host";
          d.evidence.push_back({static_cast<int>(i + 1), lines[i]});
        }
    }
  }
  // Watchdog: name the op, SeqNum and timeout in the cause.
  static const std::regex kWork(R"(SeqNum=(\d+), OpType=(\w+).*Timeout\(ms\)=(\d+))");
  for (Diagnosis& d : found) {
    if (d.signature != "watchdog.timeout") continue;
    std::smatch m;
    if (std::regex_search(d.evidence.front().text, m, kWork))
      d.cause = StrCat(m[2].str(), " SeqNum=", m[1].str(), " timed out after ", m[3].str(), " ms: ", d.cause);
  }
  for (Diagnosis& d : found)
    if (!d.evidence.empty()) ex.diagnoses.push_back(std::move(d));
  std::stable_sort(ex.diagnoses.begin(), ex.diagnoses.end(), [](const Diagnosis& a, const Diagnosis& b) {
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.evidence.front().line < b.evidence.front().line;
  });
  return ex;
}

std::string Explanation::ToText() const {
  std::ostringstream out;
  const Diagnosis* best = Best();
  if (best == nullptr) {
    out << "No confident claim: no known failure signature in the log.\n";
  } else {
    out << "Root cause (" << ToString(best->confidence) << " confidence): " << best->cause << "\n";
    out << "Fix: " << best->fix << "\n";
    out << "Evidence:\n";
    for (const EvidenceLine& e : best->evidence) out << "  line " << e.line << ": " << e.text << "\n";
  }
  if (facts.first_error.line != 0)
    out << "First error line: " << facts.first_error.line << ": " << facts.first_error.text << "\n";
  out << "NCCL versions: " << (facts.nccl_versions.empty() ? "-" : Join(facts.nccl_versions, ", ")) << "\n";
  out << "Hosts: " << (facts.hosts.empty() ? "-" : Join(facts.hosts, ", ")) << "\n";
  out << "Transports: " << (facts.transports.empty() ? "-" : Join(facts.transports, ", ")) << "\n";
  out << "Interfaces: " << (facts.interfaces.empty() ? "-" : Join(facts.interfaces, " | ")) << "\n";
  for (std::size_t i = 1; i < diagnoses.size(); ++i)
    out << "Also seen (" << ToString(diagnoses[i].confidence) << "): " << diagnoses[i].signature << " at line "
        << diagnoses[i].evidence.front().line << "\n";
  return out.str();
}

std::string Explanation::ToJson() const {
  nlohmann::json doc;
  doc["schema"] = "commkit.gpudoctor.explain/1";
  auto ev = [](const std::vector<EvidenceLine>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const EvidenceLine& e : v) a.push_back({{"line", e.line}, {"text", e.text}});
    return a;
  };
  nlohmann::json diags = nlohmann::json::array();
  for (const Diagnosis& d : diagnoses)
    diags.push_back({{"signature", d.signature},
                     {"cause", d.cause},
                     {"fix", d.fix},
                     {"confidence", ToString(d.confidence)},
                     {"evidence", ev(d.evidence)}});
  doc["diagnoses"] = diags;
  doc["claim"] = diagnoses.empty() ? "no confident claim" : diagnoses.front().signature;
  doc["facts"] = {{"nccl_versions", facts.nccl_versions}, {"hosts", facts.hosts},       {"cuda_devices", facts.ranks},
                  {"transports", facts.transports},       {"interfaces", facts.interfaces}};
  if (facts.first_error.line != 0)
    doc["facts"]["first_error"] = {{"line", facts.first_error.line}, {"text", facts.first_error.text}};
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace commkit::diagnostics
