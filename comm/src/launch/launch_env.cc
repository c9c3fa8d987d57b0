#include "commkit/comm/launch_env.h"

#include <unistd.h>

#include <functional>

#include "commkit/comm/hostlist.h"
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
  std::string out = StrCat(ToString(launcher), ": rank ", rank, "/", world_size, " (local ", local_rank, "/",
                           local_world_size, ", node ", node_rank, "/", num_nodes, "), master ", master_addr, ":",
                           master_port);
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

Status TorchStyle(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("RANK", info.rank, 0, kMaxRanks, ToString(info.launcher)));
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("WORLD_SIZE", info.world_size, 1, kMaxRanks, ToString(info.launcher)));
  info.local_world_size = info.world_size;
  COMMKIT_RETURN_IF_ERROR(r.Int("LOCAL_RANK", info.local_rank, 0, kMaxRanks).status());
  COMMKIT_ASSIGN_OR_RETURN(bool has_local_size, r.Int("LOCAL_WORLD_SIZE", info.local_world_size, 1, kMaxRanks));
  COMMKIT_ASSIGN_OR_RETURN(bool has_node, r.FirstInt({"NODE_RANK", "GROUP_RANK"}, info.node_rank, 0, kMaxRanks));
  if (has_local_size) {
    if (info.world_size % info.local_world_size != 0)
      return Status::InvalidArgument(StrCat("WORLD_SIZE=", info.world_size, " is not a multiple of LOCAL_WORLD_SIZE=",
                                            info.local_world_size));
    info.num_nodes = info.world_size / info.local_world_size;
    if (!has_node) info.node_rank = info.rank / info.local_world_size;
  } else if (has_node) {
    info.num_nodes = info.node_rank + 1;  // at least; refined below when NNODES is known
  }
  int nnodes = 0;
  COMMKIT_ASSIGN_OR_RETURN(bool has_nnodes, r.FirstInt({"NNODES", "PET_NNODES", "GROUP_WORLD_SIZE"}, nnodes, 1, kMaxRanks));
  if (has_nnodes) info.num_nodes = nnodes;
  return Consistency(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
}

Status OpenMpi(Reader& r, LaunchInfo& info) {
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("OMPI_COMM_WORLD_RANK", info.rank, 0, kMaxRanks, "Open MPI"));
  COMMKIT_RETURN_IF_ERROR(r.RequireInt("OMPI_COMM_WORLD_SIZE", info.world_size, 1, kMaxRanks, "Open MPI"));
  info.local_world_size = info.world_size;
  COMMKIT_RETURN_IF_ERROR(r.Int("OMPI_COMM_WORLD_LOCAL_RANK", info.local_rank, 0, kMaxRanks).status());
  COMMKIT_RETURN_IF_ERROR(r.Int("OMPI_COMM_WORLD_LOCAL_SIZE", info.local_world_size, 1, kMaxRanks).status());
  // OMPI_COMM_WORLD_NODE_RANK is the rank among the processes on this node (across jobs), NOT the
  // node's index: with `mpirun -np 2` on one host the second rank has NODE_RANK=1. Open MPI exports no
  // node index; with the default by-slot mapping it is rank / local size.
  info.node_rank = info.rank / info.local_world_size;
  info.num_nodes = (info.world_size + info.local_world_size - 1) / info.local_world_size;
  if (info.node_rank >= info.num_nodes) info.num_nodes = info.node_rank + 1;
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
      std::string_view value = Trim(*az);
      auto colon = value.rfind(':');
      if (colon != std::string_view::npos && value.find(':') == colon) {  // host:port (not an IPv6 literal)
        auto parsed = ParseInt(value.substr(colon + 1));
        if (!parsed || *parsed < 1 || *parsed > 65535 || colon == 0)
          return Status::InvalidArgument(StrCat(name, "='", *az, "' is not host:port with a port in 1-65535"));
        az_port = static_cast<int>(*parsed);
        value = value.substr(0, colon);
      }
      info.master_addr = std::string(value);
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
  } else if (info.num_nodes > 1 || (info.launcher == Launcher::kTorchrun && info.world_size > 1 &&
                                    info.local_world_size != info.world_size)) {
    return Status::InvalidArgument(StrCat(ToString(info.launcher), " job spans ", info.num_nodes,
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
