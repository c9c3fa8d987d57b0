#include "commkit/comm/launch_env.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "commkit/comm/hostlist.h"
#include "commkit/common/host_port.h"
#include "commkit/common/strings.h"

extern char** environ;

namespace commkit {

std::string_view ToString(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone: return "none";
    case Launcher::kCommkitRun: return "commkit-run";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kKubeflow: return "kubeflow";
    case Launcher::kAzureML: return "azureml";
    case Launcher::kOpenMPI: return "openmpi";
    case Launcher::kMpichPmi: return "mpich-pmi";
    case Launcher::kSlurm: return "slurm";
  }
  return "unknown";
}

std::string LaunchInfo::Describe() const {
  auto count = [](int n) { return n > 0 ? std::to_string(n) : std::string("?"); };
  std::string out = StrCat(ToString(launcher), ": rank ", rank, "/", world_size, " (local ", local_rank, "/",
                           count(local_world_size), ", node ", node_rank, "/", count(num_nodes), "), master ",
                           master_addr, ":", master_port);
  if (!job_id.empty()) out += StrCat(", job ", job_id);
  return out;
}

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

namespace {

class Reader {
 public:
  Reader(const EnvMap& env, LaunchInfo& info) : env_(env), info_(info) {}

  bool Has(std::string_view name) const { return env_.find(name) != env_.end(); }

  const std::string* Raw(std::string_view name) const {
    auto it = env_.find(name);
    return it == env_.end() ? nullptr : &it->second;
  }

  // Reads an integer variable into `out` when present. Returns whether it was present.
  Result<bool> Int(std::string_view name, int& out, std::int64_t min, std::int64_t max) {
    const std::string* raw = Raw(name);
    if (raw == nullptr) return false;
    auto value = ParseInt(*raw);
    if (!value) return Status::InvalidArgument(StrCat(name, "='", *raw, "' is not an integer"));
    if (*value < min || *value > max)
      return Status::InvalidArgument(StrCat(name, "='", *raw, "' is out of range [", min, ", ", max, "]"));
    out = static_cast<int>(*value);
    info_.variables.emplace_back(name);
    return true;
  }

  Status RequireInt(std::string_view name, int& out, std::int64_t min, std::int64_t max, std::string_view launcher) {
    COMMKIT_ASSIGN_OR_RETURN(bool present, Int(name, out, min, max));
    if (!present) return Status::InvalidArgument(StrCat(launcher, " launch detected but ", name, " is not set"));
    return Status::Ok();
  }

  // The first present variable among `names`.
  Result<bool> FirstInt(std::initializer_list<std::string_view> names, int& out, std::int64_t min, std::int64_t max) {
    for (auto name : names) {
      COMMKIT_ASSIGN_OR_RETURN(bool present, Int(name, out, min, max));
      if (present) return true;
    }
    return false;
  }

 private:
  const EnvMap& env_;
  LaunchInfo& info_;
};

constexpr std::int64_t kMaxRanks = 1 << 24;

Status Consistency(const LaunchInfo& info, std::string_view rank_var, std::string_view size_var,
                   std::string_view local_rank_var, std::string_view local_size_var) {
  if (info.rank >= info.world_size)
    return Status::InvalidArgument(StrCat(rank_var, "=", info.rank, " is not below ", size_var, "=", info.world_size));
  if (info.local_world_size > info.world_size)
    return Status::InvalidArgument(StrCat(local_size_var, "=", info.local_world_size, " exceeds ", size_var, "=",
                                          info.world_size));
  if (info.local_rank >= info.local_world_size)
    return Status::InvalidArgument(StrCat(local_rank_var, "=", info.local_rank, " is not below ", local_size_var, "=",
                                          info.local_world_size));
  if (info.node_rank >= info.num_nodes)
    return Status::InvalidArgument(StrCat("node rank ", info.node_rank, " is not below the node count ", info.num_nodes));
  return Status::Ok();
}

std::uint64_t Fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string JobId(const Reader& r) {
  for (auto name : {"COMMKIT_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
                    "AZUREML_RUN_ID", "PMI_JOBID"}) {
    if (const std::string* v = r.Raw(name); v != nullptr && !v->empty()) return *v;
  }
  return "";
}

// Azure Batch / Azure ML list the job's nodes in AZ_BATCH_HOST_LIST ("10.0.0.4,10.0.0.5") or
// AZ_BATCH_NODE_LIST ("10.0.0.4;10.0.0.5"): their length is the node count.
std::optional<int> AzureNodeListCount(const Reader& r) {
  for (const char* name : {"AZ_BATCH_HOST_LIST", "AZ_BATCH_NODE_LIST"}) {
    const std::string* v = r.Raw(name);
    if (v == nullptr) continue;
    std::string list = *v;
    std::replace(list.begin(), list.end(), ';', ',');
    auto hosts = Split(list, ',', true);
    if (!hosts.empty()) return static_cast<int>(hosts.size());
  }
  return std::nullopt;
}

// Kubeflow's PET_NNODES is "N" or an elastic range "MIN:MAX"; only a fixed count is a node count.
Result<bool> KubeflowNodes(Reader& r, int& out) {
  const std::string* v = r.Raw("PET_NNODES");
  if (v == nullptr) return false;
  auto colon = v->find(':');
  if (colon == std::string::npos) return r.Int("PET_NNODES", out, 1, kMaxRanks);
  auto lo = ParseInt(std::string_view(*v).substr(0, colon));
  auto hi = ParseInt(std::string_view(*v).substr(colon + 1));
  if (!lo || !hi || *lo < 1 || *hi < *lo || *hi > kMaxRanks)
    return Status::InvalidArgument(StrCat("PET_NNODES='", *v, "' is not N or MIN:MAX"));
  if (*lo != *hi) return false;  // elastic: the actual count is torchrun's business (it sets LOCAL_WORLD_SIZE)
  out = static_cast<int>(*lo);
  return true;
}

// torchrun-style variables (torchrun, Kubeflow PyTorchJob, Azure ML's PyTorch distribution).
// The node count comes from what the launcher states, never from NODE_RANK + 1 (that made node 0
// believe it was alone): LOCAL_WORLD_SIZE (torchrun), then a per-node process count (Kubeflow's
// PET_NPROC_PER_NODE), then a node count (NNODES, PET_NNODES, GROUP_WORLD_SIZE, AZUREML_NODE_COUNT,
// Azure's node lists), then RANK = NODE_RANK * L + LOCAL_RANK solved for L on nodes other than 0.
// When none applies the count is unknown (0).
// An id every rank of one run of the job shares and a later run does not: it namespaces the job's
// keys on shared (file, etcd) stores. torchrun's default --rdzv-id is "none" and its restarts keep the
// id, so the restart count is part of it; Slurm's job id repeats across steps, so the step is too.
std::string RunId(const Reader& r, const LaunchInfo& info) {
  auto get = [&](const char* name) -> std::string {
    const std::string* v = r.Raw(name);
    return v == nullptr ? std::string() : std::string(Trim(*v));
  };
  if (auto v = get("COMMKIT_RUN_ID"); !v.empty()) return v;
  if (auto v = get("TORCHELASTIC_RUN_ID"); !v.empty() && v != "none") {
    auto restart = get("TORCHELASTIC_RESTART_COUNT");
    return StrCat("torchelastic:", v, restart.empty() ? "" : ":" + restart);
  }
  if (auto v = get("SLURM_JOB_ID"); !v.empty() && (info.launcher == Launcher::kSlurm || r.Has("SLURM_STEP_ID")))
    return StrCat("slurm:", v, ".", get("SLURM_STEP_ID"));
  if (auto v = get("AZUREML_RUN_ID"); !v.empty()) return StrCat("azureml:", v);
  if (auto v = get("OMPI_MCA_ess_base_jobid"); !v.empty()) return StrCat("ompi:", v);
  if (auto v = get("PMIX_NAMESPACE"); !v.empty()) return StrCat("pmix:", v);
  if (auto v = get("PMI_JOBID"); !v.empty()) return StrCat("pmi:", v);
  if (info.launcher == Launcher::kKubeflow) {
    // The PyTorchJob's master service is "<job name>-master-0" and every pod's MASTER_ADDR names it.
    auto addr = get("MASTER_ADDR");
    if (addr.empty()) addr = get("PET_MASTER_ADDR");
    if (auto pos = addr.find("-master-0"); pos != std::string::npos && pos > 0) return StrCat("kubeflow:", addr.substr(0, pos));
  }
  // commkit-run's token is random per launch (single node) or a per-job secret (multi-node): its
  // hash names the run without putting the secret into key names.
  if (auto v = get("COMMKIT_STORE_TOKEN"); !v.empty()) return StrCat("token:", std::to_string(Fnv1a(v) % 1000000007ull));
  if (auto v = get("COMMKIT_JOB_ID"); !v.empty()) return StrCat("job:", v);
  return "";
}

// Open MPI 4 gives every rank mpirun's address in OMPI_MCA_orte_hnp_uri ("123.0;tcp://10.0.0.1,
// 172.17.0.1:41923"). With mpirun's default mapping rank 0 runs on mpirun's node, so its first
// address is where rank 0's store listens; the rendezvous checks that rank 0 really is there.
std::string OpenMpiHnpAddress(const Reader& r) {
  const std::string* uri = r.Raw("OMPI_MCA_orte_hnp_uri");
  if (uri == nullptr) return "";
  auto scheme = uri->find("tcp://");
  if (scheme == std::string::npos) return "";
  std::string_view rest = std::string_view(*uri).substr(scheme + 6);
  rest = rest.substr(0, rest.find_first_of(",:;"));
  return std::string(Trim(rest));
}

Status TorchStyle(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("RANK", info.rank, 0, kMaxRanks, ToString(info.launcher)));
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("WORLD_SIZE", info.world_size, 1, kMaxRanks, ToString(info.launcher)));
  info.local_world_size = info.world_size;
  COMMKIT_ASSIGN_OR_RETURN(bool has_local_rank, r.Int("LOCAL_RANK", info.local_rank, 0, kMaxRanks));
  COMMKIT_ASSIGN_OR_RETURN(bool has_local_size, r.Int("LOCAL_WORLD_SIZE", info.local_world_size, 1, kMaxRanks));
  if (!has_local_size) {
    // PET_NPROC_PER_NODE may also be "auto", "gpu" or "cpu": then torchrun itself sets LOCAL_WORLD_SIZE.
    for (const char* name : {"PET_NPROC_PER_NODE", "NPROC_PER_NODE"}) {
      const std::string* v = r.Raw(name);
      if (v == nullptr || !ParseInt(*v)) continue;
      COMMKIT_ASSIGN_OR_RETURN(has_local_size, r.Int(name, info.local_world_size, 1, kMaxRanks));
      break;
    }
  }
  COMMKIT_ASSIGN_OR_RETURN(bool has_node, r.FirstInt({"NODE_RANK", "GROUP_RANK", "PET_NODE_RANK"}, info.node_rank, 0, kMaxRanks));
  int nnodes = 0;
  COMMKIT_ASSIGN_OR_RETURN(bool has_nnodes, r.FirstInt({"NNODES", "GROUP_WORLD_SIZE", "AZUREML_NODE_COUNT"}, nnodes, 1, kMaxRanks));
  if (!has_nnodes) {
    COMMKIT_ASSIGN_OR_RETURN(has_nnodes, KubeflowNodes(r, nnodes));
  }
  if (!has_nnodes) {
    if (auto n = AzureNodeListCount(r)) {
      nnodes = *n;
      has_nnodes = true;
      info.variables.emplace_back(r.Has("AZ_BATCH_HOST_LIST") ? "AZ_BATCH_HOST_LIST" : "AZ_BATCH_NODE_LIST");
    }
  }
  if (has_local_size) {
    if (info.world_size % info.local_world_size != 0)
      return Status::InvalidArgument(StrCat("WORLD_SIZE=", info.world_size, " is not a multiple of LOCAL_WORLD_SIZE=",
                                            info.local_world_size));
    info.num_nodes = info.world_size / info.local_world_size;
    if (has_nnodes && nnodes != info.num_nodes)
      return Status::InvalidArgument(StrCat("the node count ", nnodes, " disagrees with WORLD_SIZE=", info.world_size,
                                            " / ", info.local_world_size, " processes per node"));
  } else if (has_nnodes) {
    if (info.world_size % nnodes != 0)
      return Status::InvalidArgument(StrCat("WORLD_SIZE=", info.world_size, " is not a multiple of the node count ",
                                            nnodes, " (", Join(info.variables, ", "), ")"));
    info.num_nodes = nnodes;
    info.local_world_size = info.world_size / nnodes;
  } else if (has_node && info.node_rank > 0 && has_local_rank && info.rank >= info.local_rank &&
             (info.rank - info.local_rank) % info.node_rank == 0 && info.rank - info.local_rank > 0 &&
             info.world_size % ((info.rank - info.local_rank) / info.node_rank) == 0) {
    info.local_world_size = (info.rank - info.local_rank) / info.node_rank;
    info.num_nodes = info.world_size / info.local_world_size;
  } else if (has_node || (has_local_rank && info.local_rank != info.rank)) {
    info.num_nodes = 0;  // a node index without a count (or ranks beyond this node): how many is not stated
  }
  if (info.num_nodes > 0 && !has_node) info.node_rank = info.rank / info.local_world_size;
  if (info.num_nodes == 0) {
    // Only the rank and local rank are meaningful; the local size is not known.
    if (info.local_rank >= info.world_size)
      return Status::InvalidArgument(StrCat("LOCAL_RANK=", info.local_rank, " is not below WORLD_SIZE=", info.world_size));
    if (info.rank >= info.world_size)
      return Status::InvalidArgument(StrCat("RANK=", info.rank, " is not below WORLD_SIZE=", info.world_size));
    info.local_world_size = 0;
    return Status::Ok();
  }
  return Consistency(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
}

Status OpenMpi(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("OMPI_COMM_WORLD_RANK", info.rank, 0, kMaxRanks, "Open MPI"));
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("OMPI_COMM_WORLD_SIZE", info.world_size, 1, kMaxRanks, "Open MPI"));
  info.local_world_size = info.world_size;
  COMMKIT_RETURN_IF_ERROR(r.Int("OMPI_COMM_WORLD_LOCAL_RANK", info.local_rank, 0, kMaxRanks).status());
  COMMKIT_RETURN_IF_ERROR(r.Int("OMPI_COMM_WORLD_LOCAL_SIZE", info.local_world_size, 1, kMaxRanks).status());
  // OMPI_COMM_WORLD_NODE_RANK is NOT the node's index: it is this process's rank among all processes on
  // its node (across jobs), so it is not read. With mpirun's default by-slot mapping every node holds
  // LOCAL_SIZE consecutive ranks, which gives the node index.
  info.num_nodes = (info.world_size + info.local_world_size - 1) / info.local_world_size;
  info.node_rank = info.rank / info.local_world_size;
  return Consistency(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                     "OMPI_COMM_WORLD_LOCAL_SIZE");
}

Status Pmi(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("PMI_RANK", info.rank, 0, kMaxRanks, "PMI"));
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("PMI_SIZE", info.world_size, 1, kMaxRanks, "PMI"));
  info.local_world_size = info.world_size;
  COMMKIT_RETURN_IF_ERROR(r.Int("MPI_LOCALRANKID", info.local_rank, 0, kMaxRanks).status());
  COMMKIT_RETURN_IF_ERROR(r.Int("MPI_LOCALNRANKS", info.local_world_size, 1, kMaxRanks).status());
  info.num_nodes = (info.world_size + info.local_world_size - 1) / info.local_world_size;
  info.node_rank = info.rank / info.local_world_size;
  return Consistency(info, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
}

Status Slurm(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("SLURM_PROCID", info.rank, 0, kMaxRanks, "Slurm"));
  // A step may use fewer tasks than the allocation: the step's own count wins.
  COMMKIT_ASSIGN_OR_RETURN(bool has_ntasks,
                           r.FirstInt({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, info.world_size, 1, kMaxRanks));
  if (!has_ntasks) return Status::InvalidArgument("Slurm launch detected but SLURM_NTASKS is not set");
  COMMKIT_RETURN_IF_ERROR(r.Int("SLURM_LOCALID", info.local_rank, 0, kMaxRanks).status());
  COMMKIT_RETURN_IF_ERROR(r.Int("SLURM_NODEID", info.node_rank, 0, kMaxRanks).status());
  COMMKIT_RETURN_IF_ERROR(r.FirstInt({"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, info.num_nodes, 1, kMaxRanks).status());
  info.local_world_size = info.world_size;
  // SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE look like "4(x2),3": the count of this node.
  const char* tpn_var = r.Has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  if (const std::string* tpn = r.Raw(tpn_var)) {
    auto malformed = [&] {
      return Status::InvalidArgument(StrCat(tpn_var, "='", *tpn, "' is malformed (expected e.g. '4(x2),3')"));
    };
    std::vector<int> per_node;
    for (const auto& item : Split(*tpn, ',', true)) {
      auto paren = item.find('(');
      auto count = ParseInt(item.substr(0, paren));
      std::int64_t repeat = 1;
      if (paren != std::string::npos) {
        // Exactly "<count>(x<repeat>)".
        auto close = item.find(')', paren);
        if (close != item.size() - 1 || item.compare(paren, 2, "(x") != 0) return malformed();
        auto rep = ParseInt(item.substr(paren + 2, close - paren - 2));
        if (!rep) return malformed();
        repeat = *rep;
      }
      if (!count || *count < 1 || *count > kMaxRanks || repeat < 1 || repeat > kMaxRanks) return malformed();
      for (std::int64_t i = 0; i < repeat && per_node.size() < static_cast<std::size_t>(kMaxRanks); ++i)
        per_node.push_back(static_cast<int>(*count));
    }
    if (info.node_rank < static_cast<int>(per_node.size())) info.local_world_size = per_node[info.node_rank];
  }
  const char* nodelist_var = r.Has("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (const std::string* nodelist = r.Raw(nodelist_var); nodelist != nullptr) {
    auto hosts = ExpandHostlist(*nodelist);
    if (!hosts.ok()) return hosts.status().WithContext(nodelist_var);
    if (static_cast<int>(hosts->size()) < info.num_nodes)
      return Status::InvalidArgument(StrCat(nodelist_var, "='", *nodelist, "' names ", hosts->size(),
                                            " hosts but the step spans ", info.num_nodes, " nodes"));
    info.hosts = std::move(hosts).value();
  }
  return Consistency(info, "SLURM_PROCID", r.Has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS",
                     "SLURM_LOCALID", "the node's task count");
}

}  // namespace

Result<LaunchInfo> DetectLaunchEnvironment(const EnvMap& env) {
  LaunchInfo info;
  Reader r(env, info);
  bool torch_style = r.Has("RANK") && r.Has("WORLD_SIZE");
  if (torch_style) {
    auto launcher_var = r.Raw("COMMKIT_LAUNCHER");
    if (launcher_var != nullptr && *launcher_var == "commkit-run") info.launcher = Launcher::kCommkitRun;
    else if (r.Has("AZUREML_RUN_ID") || r.Has("AZ_BATCH_MASTER_NODE") || r.Has("AZ_BATCHAI_MPI_MASTER_NODE"))
      info.launcher = Launcher::kAzureML;
    else if (r.Has("TORCHELASTIC_RUN_ID")) info.launcher = Launcher::kTorchrun;
    else if (r.Has("PET_NNODES") || r.Has("PET_MASTER_ADDR") || r.Has("KUBERNETES_SERVICE_HOST"))
      info.launcher = Launcher::kKubeflow;
    else info.launcher = Launcher::kTorchrun;
    COMMKIT_RETURN_IF_ERROR(TorchStyle(r, info));
  } else if (r.Has("OMPI_COMM_WORLD_SIZE") || r.Has("OMPI_COMM_WORLD_RANK")) {
    info.launcher = Launcher::kOpenMPI;
    COMMKIT_RETURN_IF_ERROR(OpenMpi(r, info));
  } else if (r.Has("PMI_RANK") || r.Has("PMI_SIZE")) {
    info.launcher = Launcher::kMpichPmi;
    COMMKIT_RETURN_IF_ERROR(Pmi(r, info));
  } else if (r.Has("SLURM_PROCID") && r.Has("SLURM_STEP_ID")) {
    info.launcher = Launcher::kSlurm;
    COMMKIT_RETURN_IF_ERROR(Slurm(r, info));
  } else if (r.Has("RANK") || r.Has("WORLD_SIZE")) {
    return Status::InvalidArgument(r.Has("RANK") ? "RANK is set but WORLD_SIZE is not" : "WORLD_SIZE is set but RANK is not");
  }
  info.job_id = JobId(r);
  info.run_id = RunId(r, info);

  // Master address and port.
  const std::string* addr = nullptr;
  for (auto name : {"MASTER_ADDR", "COMMKIT_MASTER_ADDR", "PET_MASTER_ADDR"}) {
    if ((addr = r.Raw(name)) != nullptr) {
      if (Trim(*addr).empty()) return Status::InvalidArgument(StrCat(name, " is set but empty"));
      info.variables.emplace_back(name);
      break;
    }
  }
  // Azure ML (and Azure Batch) publish rank 0 as AZ_BATCH_MASTER_NODE="host:port"; older images as
  // AZ_BATCHAI_MPI_MASTER_NODE="host". Used when MASTER_ADDR / MASTER_PORT are not set.
  int az_port = 0;
  bool from_azure = false;
  if (addr == nullptr) {
    for (const char* name : {"AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE"}) {
      const std::string* az = r.Raw(name);
      if (az == nullptr || Trim(*az).empty()) continue;
      auto hp = ParseHostPort(Trim(*az), PortRule::kOptional);
      if (!hp.ok())
        return Status::InvalidArgument(StrCat(name, "='", *az, "' is not host:port with a port in 1-65535 (", hp.status().message(), ")"));
      az_port = hp->port;
      info.master_addr = hp->host;
      info.variables.emplace_back(name);
      from_azure = true;
      break;
    }
  }
  if (addr != nullptr) {
    info.master_addr = std::string(Trim(*addr));
  } else if (from_azure) {
    // master_addr was set from the Azure variable above
  } else if (!info.hosts.empty()) {
    info.master_addr = info.hosts.front();
  } else if (auto hnp = OpenMpiHnpAddress(r); info.launcher == Launcher::kOpenMPI && info.num_nodes != 1 && !hnp.empty()) {
    info.master_addr = hnp;
    info.master_from_mpirun = true;
    info.variables.emplace_back("OMPI_MCA_orte_hnp_uri");
  } else if (info.num_nodes != 1 || (info.launcher == Launcher::kTorchrun && info.world_size > 1 &&
                                    info.local_world_size != info.world_size)) {
    return Status::InvalidArgument(StrCat(ToString(info.launcher), " job spans ",
                                          info.num_nodes > 0 ? std::to_string(info.num_nodes) : std::string("several"),
                                          " nodes but no master address is set: set MASTER_ADDR to rank 0's host"));
  }
  int port = 0;
  COMMKIT_ASSIGN_OR_RETURN(bool has_port, r.FirstInt({"MASTER_PORT", "COMMKIT_MASTER_PORT", "PET_MASTER_PORT"}, port, 1, 65535));
  if (has_port) {
    info.master_port = port;
  } else if (az_port != 0) {
    info.master_port = az_port;
  } else if (!info.job_id.empty()) {
    // All ranks derive the same port from the job id: 20000-29999 avoids the common ephemeral range.
    info.master_port = 20000 + static_cast<int>(Fnv1a(info.job_id) % 10000);
  }
  return info;
}

Result<LaunchInfo> DetectLaunchEnvironment() { return DetectLaunchEnvironment(CurrentEnvironment()); }

std::string StoreTokenFromEnvironment(const EnvMap& env, const LaunchInfo& info) {
  if (auto it = env.find("COMMKIT_STORE_TOKEN"); it != env.end() && !it->second.empty()) return it->second;
  if (!info.job_id.empty()) return "job:" + info.job_id;
  return "";
}

}  // namespace commkit
