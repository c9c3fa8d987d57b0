#include "commkit/comm/launch_env.h"

#include <gtest/gtest.h>

#include <random>

#include "commkit/comm/hostlist.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/common/strings.h"

namespace commkit {
namespace {

TEST(Hostlist, ExpandsRangesPaddingAndProducts) {
  EXPECT_EQ(*ExpandHostlist("node1"), (std::vector<std::string>{"node1"}));
  EXPECT_EQ(*ExpandHostlist("gpu-[01-03,7],cpu[1-2]-ib"),
            (std::vector<std::string>{"gpu-01", "gpu-02", "gpu-03", "gpu-7", "cpu1-ib", "cpu2-ib"}));
  EXPECT_EQ(*ExpandHostlist("r[1-2]n[08-09]"), (std::vector<std::string>{"r1n08", "r1n09", "r2n08", "r2n09"}));
  EXPECT_EQ(*ExpandHostlist("a[098-101]"), (std::vector<std::string>{"a098", "a099", "a100", "a101"}));
  EXPECT_EQ(*ExpandHostlist("x,y"), (std::vector<std::string>{"x", "y"}));
}

TEST(Hostlist, RejectsBadSyntaxAndHugeRanges) {
  for (const char* bad : {"", "a[1-2", "a1-2]", "a[]", "a[3-1]", "a[x-2]", "a[[1]]", "a,,b", "a[1-2],"}) {
    auto r = ExpandHostlist(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' should fail";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto huge = ExpandHostlist("n[0-99999999]", 1000);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than 1000 hosts"), std::string::npos);
  EXPECT_FALSE(ExpandHostlist("n[0-999]m[0-999]", 10000).ok()) << "products are bounded too";
}

TEST(Hostlist, RandomInputNeverCrashesAndStaysBounded) {
  // Deterministic fuzz: every input gives hosts (within the bound) or InvalidArgument.
  std::mt19937 rng(12345);
  const std::string alphabet = "[]-,0123456789ab ";
  for (int i = 0; i < 20000; ++i) {
    std::string input;
    int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) input += alphabet[rng() % alphabet.size()];
    auto r = ExpandHostlist(input, 500);
    if (r.ok()) {
      EXPECT_LE(r->size(), 500u) << input;
      for (const auto& host : *r) EXPECT_FALSE(host.empty()) << input;
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << input;
    }
  }
}

TEST(LaunchEnv, NoLauncherIsSingleProcess) {
  auto info = DetectLaunchEnvironment(EnvMap{});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kNone);
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_EQ(info->master_addr, "127.0.0.1");
}

TEST(LaunchEnv, Torchrun) {
  EnvMap env{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
             {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "abc"},
             {"GROUP_RANK", "1"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kTorchrun);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->num_nodes, 2);
  EXPECT_EQ(info->master_addr, "10.0.0.1");
  EXPECT_EQ(info->master_port, 29400);
  EXPECT_EQ(info->job_id, "abc");
  EXPECT_EQ(info->Describe(), "torchrun: rank 5/8 (local 1/4, node 1/2), master 10.0.0.1:29400, job abc");
}

TEST(LaunchEnv, KubeflowAndAzureMlAreNamed) {
  EnvMap kf{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"},
            {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"PET_NNODES", "2"}};
  EXPECT_EQ(DetectLaunchEnvironment(kf)->launcher, Launcher::kKubeflow);
  EXPECT_EQ(DetectLaunchEnvironment(kf)->num_nodes, 2);
  EnvMap az{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"AZ_BATCH_MASTER_NODE", "10.0.0.4:6105"}, {"AZUREML_RUN_ID", "run1"},
            {"MASTER_PORT", "6105"}};
  auto info = DetectLaunchEnvironment(az);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kAzureML);
  EXPECT_EQ(info->master_addr, "10.0.0.4") << "AZ_BATCH_MASTER_NODE is host:port";
  EXPECT_EQ(info->job_id, "run1");
}

TEST(LaunchEnv, AzureMlMpiDistributionTakesMasterAndPortFromAzBatchMasterNode) {
  // Azure ML's MPI distribution: Open MPI's variables plus AZ_BATCH_MASTER_NODE, no MASTER_*.
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_COMM_WORLD_NODE_RANK", "1"},
             {"AZ_BATCH_MASTER_NODE", "10.0.0.4:6105"}, {"AZUREML_RUN_ID", "run7"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kOpenMPI);
  EXPECT_EQ(info->master_addr, "10.0.0.4");
  EXPECT_EQ(info->master_port, 6105);
  EXPECT_EQ(info->job_id, "run7");
  // MASTER_PORT, when set, wins over the port in AZ_BATCH_MASTER_NODE; older images set only a host.
  env["MASTER_PORT"] = "29501";
  EXPECT_EQ(DetectLaunchEnvironment(env)->master_port, 29501);
  env.erase("AZ_BATCH_MASTER_NODE");
  env["AZ_BATCHAI_MPI_MASTER_NODE"] = "10.0.0.9";
  EXPECT_EQ(DetectLaunchEnvironment(env)->master_addr, "10.0.0.9");
}

TEST(LaunchEnv, OpenMpiWithoutMasterOnOneNodeUsesLoopback) {
  // As mpirun sets them on one host: NODE_RANK is the rank among the node's processes, not a node index.
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_COMM_WORLD_NODE_RANK", "2"}, {"OMPI_MCA_ess_base_jobid", "777"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kOpenMPI);
  EXPECT_EQ(info->rank, 2);
  EXPECT_EQ(info->node_rank, 0);
  EXPECT_EQ(info->num_nodes, 1);
  EXPECT_EQ(info->master_addr, "127.0.0.1");
  EXPECT_EQ(info->job_id, "777");
  // The port is derived from the job id, identically on every rank.
  EXPECT_EQ(info->master_port, DetectLaunchEnvironment(env)->master_port);
  EXPECT_GE(info->master_port, 20000);
  EXPECT_LT(info->master_port, 30000);
}

TEST(LaunchEnv, OpenMpiAcrossNodesNeedsAMaster) {
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_COMM_WORLD_NODE_RANK", "1"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("set MASTER_ADDR"), std::string::npos) << info.status().message();
  env["MASTER_ADDR"] = "head";
  EXPECT_TRUE(DetectLaunchEnvironment(env).ok());
}

TEST(LaunchEnv, MpichPmi) {
  EnvMap env{{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"},
             {"MASTER_ADDR", "n0"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kMpichPmi);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->num_nodes, 2);
}

TEST(LaunchEnv, SlurmMasterIsTheFirstHost) {
  EnvMap env{{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}, {"SLURM_NODEID", "1"},
             {"SLURM_NNODES", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "4242"},
             {"SLURM_STEP_NODELIST", "gpu-[07-08]"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kSlurm);
  EXPECT_EQ(info->master_addr, "gpu-07");
  EXPECT_EQ(info->hosts, (std::vector<std::string>{"gpu-07", "gpu-08"}));
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->job_id, "4242");
  EXPECT_EQ(StoreTokenFromEnvironment(env, *info), "job:4242");
  env["COMMKIT_STORE_TOKEN"] = "secret";
  EXPECT_EQ(StoreTokenFromEnvironment(env, *info), "secret");
}

TEST(LaunchEnv, SlurmStepCountsWinOverTheAllocation) {
  // `srun -n 4` inside an allocation of 8 tasks on 2 nodes: the step has 4 tasks on 1 node.
  EnvMap env{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NNODES", "2"},
             {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_LOCALID", "3"}, {"SLURM_NODEID", "0"}, {"SLURM_STEP_ID", "2"},
             {"SLURM_JOB_ID", "99"}, {"SLURM_JOB_NODELIST", "a[1-2]"}, {"SLURM_STEP_NODELIST", "a2"},
             {"SLURM_STEP_TASKS_PER_NODE", "4"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->world_size, 4);
  EXPECT_EQ(info->num_nodes, 1);
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->master_addr, "a2") << "the step's first node, not the allocation's";
  env["SLURM_PROCID"] = "4";
  auto bad = DetectLaunchEnvironment(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("SLURM_PROCID=4 is not below SLURM_STEP_NUM_TASKS=4"), std::string::npos)
      << bad.status().message();
}

TEST(LaunchEnv, PrecedenceInnermostLauncherWins) {
  // torchrun started by srun: both sets present, torchrun's per-process variables describe us.
  EnvMap env{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "1"},
             {"SLURM_NNODES", "2"}, {"SLURM_STEP_NODELIST", "n[1-2]"}, {"RANK", "7"}, {"WORLD_SIZE", "8"},
             {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kTorchrun);
  EXPECT_EQ(info->rank, 7);
  // mpirun inside a Slurm allocation: Open MPI's variables win.
  EnvMap mpi{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "batch"}, {"OMPI_COMM_WORLD_RANK", "1"},
             {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_EQ(DetectLaunchEnvironment(mpi)->launcher, Launcher::kOpenMPI);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  struct Case {
    EnvMap env;
    std::string expected;
  };
  std::vector<Case> cases = {
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK='x' is not an integer"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK=2 is not below WORLD_SIZE=2"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000' is out of range [1, 65535]"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", " "}}, "MASTER_ADDR is set but empty"},
      {{{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "3"}}, "not a multiple of LOCAL_WORLD_SIZE=3"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
       "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}}, "no master address is set"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE is not set"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NODELIST", "n[1-"}},
       "SLURM_STEP_NODELIST"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_TASKS_PER_NODE", "2(x"}},
       "SLURM_TASKS_PER_NODE='2(x' is malformed"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3"}},
       "SLURM_STEP_TASKS_PER_NODE='2(x3' is malformed"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_TASKS_PER_NODE", "2(y3)"}},
       "SLURM_TASKS_PER_NODE='2(y3)' is malformed"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[2-1]"}},
       "SLURM_JOB_NODELIST"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NNODES", "3"},
        {"SLURM_STEP_NODELIST", "n[1-2]"}},
       "SLURM_STEP_NODELIST='n[1-2]' names 2 hosts but the step spans 3 nodes"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"AZ_BATCH_MASTER_NODE", "10.0.0.4:99999"}},
       "AZ_BATCH_MASTER_NODE='10.0.0.4:99999' is not host:port"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"AZ_BATCH_MASTER_NODE", ":6105"}},
       "AZ_BATCH_MASTER_NODE=':6105'"},
  };
  for (const auto& c : cases) {
    auto info = DetectLaunchEnvironment(c.env);
    ASSERT_FALSE(info.ok()) << c.expected;
    EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(info.status().message().find(c.expected), std::string::npos)
        << "expected '" << c.expected << "' in: " << info.status().message();
  }
}


TEST(LaunchEnv, AzureMlPytorchDistributionCountsNodesFromTheLauncher) {
  // Azure ML's PyTorch distribution: RANK, WORLD_SIZE, NODE_RANK, LOCAL_RANK, no LOCAL_WORLD_SIZE.
  EnvMap node1{{"RANK", "9"},  {"WORLD_SIZE", "16"}, {"NODE_RANK", "1"},          {"LOCAL_RANK", "1"},
               {"MASTER_ADDR", "10.0.0.4"}, {"MASTER_PORT", "6105"}, {"AZUREML_RUN_ID", "run9"},
               {"AZUREML_NODE_COUNT", "2"}};
  auto info = DetectLaunchEnvironment(node1);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kAzureML);
  EXPECT_EQ(info->Describe(), "azureml: rank 9/16 (local 1/8, node 1/2), master 10.0.0.4:6105, job run9");
  EXPECT_EQ(info->run_id, "azureml:run9");
  // Node 0 used to believe it was alone (node count = NODE_RANK + 1).
  EnvMap node0 = node1;
  node0["RANK"] = "1";
  node0["NODE_RANK"] = "0";
  info = DetectLaunchEnvironment(node0);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->num_nodes, 2);
  EXPECT_EQ(info->local_world_size, 8);
  // Without AZUREML_NODE_COUNT: node 1 solves RANK = NODE_RANK * L + LOCAL_RANK; node 0 cannot know.
  node1.erase("AZUREML_NODE_COUNT");
  node0.erase("AZUREML_NODE_COUNT");
  EXPECT_EQ(DetectLaunchEnvironment(node1)->num_nodes, 2);
  info = DetectLaunchEnvironment(node0);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->num_nodes, 0) << "unknown, not 1";
  EXPECT_NE(info->Describe().find("node 0/?"), std::string::npos) << info->Describe();
  // Azure Batch's node list counts the nodes too.
  node0["AZ_BATCH_NODE_LIST"] = "10.0.0.4;10.0.0.5";
  EXPECT_EQ(DetectLaunchEnvironment(node0)->num_nodes, 2);
}

TEST(LaunchEnv, KubeflowPetVariablesGiveTheNode) {
  // A classic PyTorchJob pod: one process per pod, WORLD_SIZE = pods, RANK = pod index.
  EnvMap env{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PET_NNODES", "2"}, {"MASTER_ADDR", "mnist-master-0"},
             {"MASTER_PORT", "23456"}, {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kKubeflow);
  EXPECT_EQ(info->node_rank, 1) << info->Describe();
  EXPECT_EQ(info->num_nodes, 2);
  EXPECT_EQ(info->local_world_size, 1);
  EXPECT_EQ(info->run_id, "kubeflow:mnist");
  // PET_NPROC_PER_NODE states the per-node count; an elastic PET_NNODES range is not a count.
  EnvMap elastic{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"PET_NNODES", "1:4"}, {"PET_NPROC_PER_NODE", "4"},
                 {"MASTER_ADDR", "job-master-0"}, {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  info = DetectLaunchEnvironment(elastic);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->num_nodes, 2);
  elastic["PET_NNODES"] = "4:1";
  EXPECT_FALSE(DetectLaunchEnvironment(elastic).ok());
}

TEST(LaunchEnv, TorchDistributorTorchrunRunIdsAndTheAgentStore) {
  // Spark's TorchDistributor runs torchrun: default rdzv id "none", restarts keep the id.
  EnvMap env{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
             {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.0.2"}, {"MASTER_PORT", "29500"},
             {"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
             {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, Launcher::kTorchrun);
  EXPECT_EQ(info->run_id, "") << "'none' names no run";
  // torchrun's agent serves MASTER_PORT: commkit's store starts on the next port, on every rank.
  auto ports = StorePortCandidates(info->master_port, env);
  ASSERT_EQ(ports.size(), 8u);
  EXPECT_EQ(ports.front(), 29501);
  env.erase("TORCHELASTIC_USE_AGENT_STORE");
  EXPECT_EQ(StorePortCandidates(29500, env).front(), 29500);
  EXPECT_EQ(StorePortCandidates(65533, env).size(), 3u) << "never past 65535";
  env["TORCHELASTIC_RUN_ID"] = "job7";
  EXPECT_EQ(DetectLaunchEnvironment(env)->run_id, "torchelastic:job7:0");
  env["TORCHELASTIC_RESTART_COUNT"] = "1";
  EXPECT_EQ(DetectLaunchEnvironment(env)->run_id, "torchelastic:job7:1") << "a restart is a new run";
}

TEST(LaunchEnv, RunIdsFromOtherLaunchers) {
  EnvMap slurm{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "3"}, {"SLURM_JOB_ID", "42"}};
  EXPECT_EQ(DetectLaunchEnvironment(slurm)->run_id, "slurm:42.3");
  EnvMap ompi{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_MCA_ess_base_jobid", "77"}};
  EXPECT_EQ(DetectLaunchEnvironment(ompi)->run_id, "ompi:77");
  EnvMap run{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COMMKIT_LAUNCHER", "commkit-run"}, {"COMMKIT_STORE_TOKEN", "s3cret"}};
  auto info = DetectLaunchEnvironment(run);
  ASSERT_TRUE(StartsWith(info->run_id, "token:")) << info->run_id;
  EXPECT_EQ(info->run_id.find("s3cret"), std::string::npos) << "the secret stays out of key names";
  run["COMMKIT_RUN_ID"] = "mine";
  EXPECT_EQ(DetectLaunchEnvironment(run)->run_id, "mine");
}

TEST(LaunchEnv, OpenMpiAcrossNodesUsesMpirunsHost) {
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_MCA_orte_hnp_uri", "3735552000.0;tcp://10.0.0.7,172.17.0.1:41923"}};
  auto info = DetectLaunchEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->master_addr, "10.0.0.7");
  EXPECT_TRUE(info->master_from_mpirun);
  env["MASTER_ADDR"] = "head";
  EXPECT_EQ(DetectLaunchEnvironment(env)->master_addr, "head") << "MASTER_ADDR wins";
}

}  // namespace
}  // namespace commkit
