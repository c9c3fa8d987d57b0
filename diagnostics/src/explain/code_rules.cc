#include "code_rules.h"

#include <algorithm>

#include "error_codes.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

bool Has(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// NCCL source files whose failures point at one subsystem (used only when the message itself names no
// cause: these are weak, low-confidence hints).
struct FileHint {
  const char* file;
  const char* family;
  int score;
  const char* cause;
};
constexpr FileHint kFileHints[] = {
    {"transport/p2p", "p2p.unsupported", 40,
     "A CUDA call failed inside NCCL's P2P transport (transport/p2p.cc): peer access / CUDA IPC between these GPUs "
     "is the usual suspect"},
    {"graph/xml", "topo.file", 45, "NCCL failed while reading a topology XML (graph/xml): NCCL_TOPO_FILE or a "
     "plugin-provided topology file"},
    {"graph/topo", "topo.file", 40, "NCCL failed while building the topology (graph/topo.cc)"},
    {"graph/paths", "topo.file", 38, "NCCL could not place the GPUs / NICs in the topology it detected (graph/paths.cc): "
     "in VMs and containers the PCI tree NCCL reads from sysfs is incomplete; a topology file for the machine fixes it"},
    {"graph/", "topo.file", 34, "NCCL failed in topology detection / search (graph/): the topology it read (sysfs or "
     "NCCL_TOPO_FILE) does not describe this machine"},
    {"misc/shmutils", "shm.space", 34, "NCCL's shared-memory segment code failed (misc/shmutils.cc): most often /dev/shm "
     "too small or not shared between the local ranks"},
    {"transport/shm", "shm.other", 34, "NCCL's shared-memory transport failed (transport/shm.cc)"},
    {"transport/nvls", "nvls.fabricmanager", 36, "NCCL's NVLink SHARP (NVLS) transport failed: multicast objects need "
     "a healthy fabric manager / IMEX"},
    {"mnnvl", "nvls.fabricmanager", 40, "NCCL's multi-node NVLink setup failed: the IMEX service / fabric manager "
     "configuration of the NVLink domain"},
};

// The file a NCCL warning comes from: printed before "NCCL WARN" by newer releases, else the one the message
// catalog knows prints this format (the line of an older release is the same text).
std::string_view WarnFile(const Message& m) {
  if (!m.line->nccl_file.empty()) return m.line->nccl_file;
  if (m.match.entry != nullptr && m.match.entry->source == "nccl") return m.match.entry->files;
  return {};
}

// NCCLCHECK prints "INFO file.cc:line -> result" at every level an error passes through, deepest first: the
// first such line of an input names the source file where the failure began. Used only as a weak hint for
// logs whose warning line is missing (pasted without it, or NCCL_DEBUG=INFO lines cut).
struct ChainHint {
  const char* file;
  int result;  // ncclResult_t the origin returned (0: any)
  const char* family;
  int score;
  const char* cause;
};
constexpr ChainHint kChainHints[] = {
    {"shm", 2, "shm.space", 34, "NCCL's error began in its shared-memory code (system error): most often /dev/shm "
     "too small for the segments"},
    {"transport/p2p", 1, "p2p.unsupported", 34, "NCCL's error began in the P2P transport with a CUDA failure: peer "
     "access / CUDA IPC between these GPUs"},
    {"graph/", 0, "topo.file", 34, "NCCL's error began in topology detection / search (graph/): the topology it read "
     "(sysfs or NCCL_TOPO_FILE) does not describe this machine"},
    {"transport/nvls", 0, "nvls.fabricmanager", 34, "NCCL's error began in the NVLS transport"},
    {"socket", 6, "socket.peer_closed", 30, "NCCL's error began in its socket code with a remote error: the peer "
     "closed the connection"},
    {"socket", 2, "socket.unreachable", 34, "NCCL's error began in its socket code with a system error: a "
     "connection between ranks could not be made"},
    {"include/alloc", 1, "cuda.oom", 30, "NCCL's error began allocating memory with a CUDA failure: the GPU is out "
     "of memory"},
    {"ofi", 0, "efa.provider", 34, "The error began in the aws-ofi-nccl / libfabric plugin"},
};

// "misc/shmutils.cc:88 -> 2 (..)" -> {"misc/shmutils.cc", 2}; result -1 when the body is not a trace line.
std::pair<std::string, int> ChainFrame(std::string_view body) {
  std::size_t colon = body.find(':');
  std::size_t arrow = body.find(" -> ");
  if (colon == std::string_view::npos || arrow == std::string_view::npos || colon > arrow || colon == 0) return {"", -1};
  std::string_view file = body.substr(0, colon);
  if (file.find(' ') != std::string_view::npos || file.find('.') == std::string_view::npos) return {"", -1};
  int result = 0;
  std::size_t i = arrow + 4;
  if (i >= body.size() || body[i] < '0' || body[i] > '9') return {"", -1};
  for (; i < body.size() && body[i] >= '0' && body[i] <= '9' && result < 1000; ++i) result = result * 10 + (body[i] - '0');
  return {std::string(file), result};
}

void ChainRules(const RuleContext& ctx, Candidates& c) {
  std::vector<int> seen;  // inputs whose first trace line was taken
  for (const Message& m : ctx.messages) {
    if (!m.line->nccl_info || std::find(seen.begin(), seen.end(), m.line->source) != seen.end()) continue;
    auto [file, result] = ChainFrame(m.line->body);
    if (result <= 0) continue;
    seen.push_back(m.line->source);
    for (const ChainHint& h : kChainHints)
      if (Contains(file, h.file) && (h.result == 0 || h.result == result)) {
        c.Hit(h.family, h.score, false, h.cause, &m);
        break;
      }
  }
}

}  // namespace

void CodeRules(const RuleContext& ctx, Candidates& c, bool efa_ctx) {
  ChainRules(ctx, c);
  bool earlier_cuda_code = false;
  for (const Message& m : ctx.messages) {
    const std::string& l = m.lower;
    // An errno or a CUDA code is itself a failure report, worded or not ("fi_getinfo: -61 (No data
    // available)"); an INFO banner is not.
    int catalog_code = -1;
    if (m.match.entry != nullptr && m.match.entry->source == "cudart") catalog_code = CudaCodeOfCatalogFiles(m.match.entry->files);
    std::vector<int> codes = CudaCodesIn(l, catalog_code);
    std::vector<std::string> errs = ErrnosIn(l);
    if (!LooksLikeError(m) && (m.line->nccl_info || (codes.empty() && errs.empty()))) continue;

    // --- CUDA codes
    bool any_family = false;
    for (int code : codes) {
      const CudaCodeMeaning* meaning = CudaCode(code);
      if (meaning == nullptr || meaning->family[0] == '\0') continue;
      any_family = true;
      std::string_view family = meaning->family;
      // A missing / invalid device after another CUDA failure is usually its consequence.
      if (family == "cuda.no_device" && earlier_cuda_code) {
        c.Hit(family, 52, false, std::string(meaning->cause) + " (after an earlier CUDA failure)", &m);
        continue;
      }
      c.Hit(family, meaning->score, meaning->provable, meaning->cause, &m);
    }
    if (!codes.empty()) {
      // cudaErrorInvalidValue says where, not why: inside the P2P transport it points at peer access.
      if (!any_family && std::find(codes.begin(), codes.end(), 1) != codes.end() && Contains(l, "transport/p2p"))
        c.Hit("p2p.unsupported", 45, false, "A CUDA call inside NCCL's P2P transport was refused (invalid argument): "
              "CUDA IPC / peer access between these GPUs", &m);
      earlier_cuda_code = true;
    }

    // --- errnos reported by a subsystem
    bool verbs = Any(l, {"ibv_", "mlx5", "register memory", "register_mr", "reg_mr", "fi_mr_reg", "mr_reg"});
    if (verbs && Has(errs, "ENODEV"))
      c.Hit("ib.no_device", 62, false, "An RDMA verb failed with ENODEV (no such device): the HCA NCCL picked is "
            "not usable here (wrong NCCL_IB_HCA, device not passed into the container, or an SR-IOV function that "
            "moved)", &m);
    if (verbs && Has(errs, "ENOMEM") && Any(l, {"register memory", "register_mr", "reg_mr", "mr_reg"}))
      c.Hit("ib.memlock", 80, false, "Registering memory with the NIC failed with ENOMEM: the locked-memory limit "
            "(ulimit -l) is too low for the job", &m);
    if (efa_ctx && Has(errs, "ENODATA"))
      c.Hit("efa.provider", 66, false, "libfabric found no usable provider (fi_getinfo: -61 / FI_ENODATA): the EFA "
            "devices or the efa provider are not available in this environment", &m);

    // --- messages whose meaning the NCCL sources fix, whatever the code
    if (Any(l, {"verify nccl_oob_net_ifname", "no usable listening interface found"}))
      c.Hit("socket.ifname_missing", 72, false, "NCCL found no interface matching its OOB / socket interface setting "
            "(NCCL_OOB_NET_IFNAME / NCCL_SOCKET_IFNAME names none that exists with an address)", &m);
    if (Any(l, {"failed to cuda calloc", "failed to cuda malloc", "failed to cuda host alloc",
                  "failed to cuda calloc async"}))
      c.Hit("cuda.oom", 70, false, "NCCL could not allocate its GPU / pinned host buffers: the GPU (or pinned host "
            "memory) is exhausted", &m);
    // ibv_get_async_event: NCCL prints every event; the port / device / QP / CQ error events are a fabric or NIC
    // failing, the others (port active, GID / LID / P_Key change, "non-fatal") are bookkeeping.
    if (Contains(l, "got async error event") ||
        (Contains(l, "got async event") &&
         Any(l, {"port error", "device fatal", "local catastrophic", "qp fatal", "cq error", "path mig req",
                 "local work queue catastrophic", "invalid request local wq", "local access violation"})))
      c.Hit("ib.completion_error", 55, false, "The HCA raised an asynchronous error event (port / link / device "
            "error): a fabric or NIC problem", &m);
    // EFAULT from a memory registration: the kernel could not pin the pages. NCCL registers GPU buffers, which
    // needs the peer-memory module (nvidia-peermem) or DMA-BUF; without it the registration fails this way.
    if (verbs && Has(errs, "EFAULT") && Any(l, {"reg_mr", "reg_dmabuf_mr", "register"}))
      c.Hit("ib.gdr", 62, false, "Registering GPU memory with the NIC failed with EFAULT: GPUDirect RDMA is not "
            "available (nvidia-peermem not loaded, or DMA-BUF unsupported by this driver / kernel)", &m);
    else if (Contains(l, "ibv_reg_dmabuf_mr") && LooksLikeError(m))
      c.Hit("ib.gdr", 50, false, "Registering GPU memory through DMA-BUF failed: the driver / kernel / NIC stack "
            "does not support DMA-BUF GPUDirect RDMA here (NCCL_DMABUF_ENABLE=0 falls back to nvidia-peermem)", &m);
    // Every rank tells the bootstrap root the communicator size it was given; different answers mean the
    // launch gave ranks different world sizes.
    if (Contains(l, "mismatch in rank count"))
      c.Hit("store.rendezvous_timeout", 60, false, "Ranks joined the NCCL bootstrap with different world sizes: the "
            "launcher gave them different WORLD_SIZE / nranks", &m);

    // --- the NCCL source file of a warning
    if (m.line->nccl_warn && codes.empty())
      for (const FileHint& h : kFileHints)
        if (Contains(WarnFile(m), h.file)) c.Hit(h.family, h.score, false, h.cause, &m);
    // misc/cudawrap.cc checks the driver against the CUDA version NCCL was built for.
    if (Contains(l, "cuda driver version found is") && Contains(l, "minimum requirement"))
      c.Hit("cuda.driver_too_old", 82, true, "NCCL found a CUDA driver older than the minimum it was built for", &m);
  }
}

}  // namespace commkit::diagnostics::explain
