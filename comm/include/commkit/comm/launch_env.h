// Launch-environment detection: who started this process, and where rank 0 listens.
//
// Recognised launchers, in order of precedence when several leave variables behind (torchrun started
// by srun, mpirun inside a Slurm allocation):
//   1. commkit-run          COMMKIT_LAUNCHER=commkit-run plus the torchrun variables
//   2. torchrun / Kubeflow PyTorchJob / Azure ML   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK,
//                           LOCAL_WORLD_SIZE, NODE_RANK / GROUP_RANK, node counts from NNODES, PET_NNODES,
//                           PET_NPROC_PER_NODE, AZUREML_NODE_COUNT, AZ_BATCH_{HOST,NODE}_LIST (the launcher
//                           is named from TORCHELASTIC_RUN_ID, PET_* / KUBERNETES_SERVICE_HOST,
//                           AZUREML_RUN_ID / AZ_BATCH_*). docs/launchers.md has the details.
//   3. Open MPI             OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}
//   4. MPICH / Intel MPI (PMI)  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   5. Slurm (srun)         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES,
//                           SLURM_STEP_NODELIST / SLURM_JOB_NODELIST (master = first host)
// The per-process variables of the innermost launcher win, because they describe this process.
// The master address comes from MASTER_ADDR when set; otherwise from the Slurm node list, or
// 127.0.0.1 when every rank is on this node; MASTER_PORT (or COMMKIT_MASTER_PORT) likewise, else a
// port derived from the job id so all ranks agree without talking.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

enum class Launcher {
  kNone,        // a single process started by hand: rank 0 of 1
  kCommkitRun,
  kTorchrun,
  kKubeflow,
  kAzureML,
  kOpenMPI,
  kMpichPmi,
  kSlurm,
};

std::string_view ToString(Launcher launcher);

using EnvMap = std::map<std::string, std::string, std::less<>>;

struct LaunchInfo {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // 0 when the launcher does not say (see num_nodes)
  int node_rank = 0;
  int num_nodes = 1;         // 0 when the job spans several nodes but the launcher does not say how many
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string job_id;                  // "" when the launcher gives none
  // Names this run of the job (docs/launchers.md, "run id"): the launcher's job/run id, with
  // torchrun's restart count or Slurm's step; "" when the launcher gives none.
  std::string run_id;
  bool master_from_mpirun = false;     // master_addr is mpirun's host (Open MPI without MASTER_ADDR)
  std::vector<std::string> hosts;      // the expanded Slurm node list, when known
  std::vector<std::string> variables;  // the variables this was read from, for the report

  // "torchrun: rank 3/8 (local 1/4, node 0/2), master 10.0.0.1:29500, job abc"
  std::string Describe() const;
};

// Detects the launcher from `env` (tests pass a map; the overload reads the process environment).
// InvalidArgument names the variable and its value for malformed or inconsistent input: non-numeric
// or negative numbers, rank >= size, local rank >= local size, a port outside 1-65535, a multi-node
// job without a master address.
Result<LaunchInfo> DetectLaunchEnvironment(const EnvMap& env);
Result<LaunchInfo> DetectLaunchEnvironment();

// The process environment as an EnvMap.
EnvMap CurrentEnvironment();

// The job token a TcpStore client presents: COMMKIT_STORE_TOKEN, else derived from the launcher's
// job id ("job:<id>"), else "" (no token: only for single-host jobs on loopback).
std::string StoreTokenFromEnvironment(const EnvMap& env, const LaunchInfo& info);

}  // namespace commkit
