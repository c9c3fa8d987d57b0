// The "reproduce" command: launcher detection, environment capture, quoting, and its presence in the
// table, JSON-lines and CSV outputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/bench/report.h"
#include "commkit/bench/reproduce.h"
#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

const std::vector<std::string> kArgv = {"build/bin/commkit-bench", "allreduce", "-b", "8", "-e", "1M"};

std::string Command(EnvMap env, std::vector<std::string> argv = kArgv, bool local = false, bool as_root = false) {
  return ReproduceCommand({.argv = std::move(argv), .env = std::move(env), .local = local, .as_root = as_root});
}

// Splits a CSV line on commas outside double quotes, removing the quotes (RFC 4180).
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

TEST(BenchReproduce, ShellQuoting) {
  EXPECT_EQ(ShellQuote("allreduce"), "allreduce");
  EXPECT_EQ(ShellQuote("--compare=host,mpi"), "--compare=host,mpi");
  EXPECT_EQ(ShellQuote("/a/b-c_d.e@f%g+h:i"), "/a/b-c_d.e@f%g+h:i");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("my results.json"), "'my results.json'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\"'\"'s'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("a*b"), "'a*b'");
}

TEST(BenchReproduce, LocalRunsHaveNoLauncherAndQuoteArguments) {
  EnvMap env{{"COMMKIT_HOST_ALGORITHM", "ring"}, {"HOME", "/root"}, {"PATH", "/usr/bin"},
             // a launcher's variables are ignored under --local
             {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}};
  EXPECT_EQ(Command(env, {"commkit-bench", "allgather", "--local", "3", "--output", "my results.json"}, true),
            "COMMKIT_HOST_ALGORITHM=ring commkit-bench allgather --local 3 --output 'my results.json'");
  EXPECT_EQ(Command({}, {"commkit-bench", "--local", "2"}, true), "commkit-bench --local 2");
}

TEST(BenchReproduce, OneProcessStartedByHandIsTheArgvAlone) {
  EXPECT_EQ(Command({{"HOME", "/root"}}), "build/bin/commkit-bench allreduce -b 8 -e 1M");
}

TEST(BenchReproduce, EnvironmentCaptureKeepsTuningVariablesOnly) {
  EnvMap env{{"COMMKIT_INLINE_BYTES", "4096"},
             {"COMMKIT_STORE_TOKEN", "s3cret"},  // a secret: never printed
             {"COMMKIT_LAUNCHER", "commkit-run"},
             {"COMMKIT_STORE_HOSTED", "1"},
             {"NCCL_ALGO", "Ring"},
             {"GLOO_SOCKET_IFNAME", "lo"},
             {"UCX_TLS", "shm, tcp"},
             {"UCX_", "prefix alone"},
             {"OMPI_MCA_btl", "self,vader"},
             {"OMPI_MCA_orte_hnp_uri", "1.0;tcp://10.0.0.1:4000"},  // set by mpirun
             {"OMPI_MCA_ess_base_jobid", "42"},
             {"OMPI_MCA_pmix", "^s1"},
             {"OMPI_MCA_mpi_oversubscribe", "0"},
             {"OMPI_MCA_initial_wdir", "/tmp"},
             {"OMPI_MCA_shmem_RUNTIME_QUERY_hint", "mmap"},
             {"MY_API_TOKEN_FOR_NCCL", "x"},
             {"NCCL_IB_PASSWORD", "x"},
             {"PATH", "/usr/bin"},
             {"OMPI_COMM_WORLD_SIZE", "2"}};
  const auto vars = TuningVariables(env);
  std::vector<std::string> names;
  for (const auto& kv : vars) names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"COMMKIT_INLINE_BYTES", "GLOO_SOCKET_IFNAME", "NCCL_ALGO",
                                             "OMPI_MCA_btl", "UCX_TLS"}));
  EXPECT_EQ(Command(env, {"commkit-bench"}, true),
            "COMMKIT_INLINE_BYTES=4096 GLOO_SOCKET_IFNAME=lo NCCL_ALGO=Ring OMPI_MCA_btl=self,vader "
            "UCX_TLS='shm, tcp' commkit-bench");
}

TEST(BenchReproduce, CommkitRun) {
  EnvMap env{{"RANK", "1"},          {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "1"},
             {"LOCAL_WORLD_SIZE", "4"}, {"NODE_RANK", "0"},     {"GROUP_RANK", "0"},
             {"NNODES", "1"},        {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "40123"},
             {"COMMKIT_LAUNCHER", "commkit-run"}, {"COMMKIT_STORE_TOKEN", "abc"}, {"COMMKIT_STORE_HOSTED", "1"},
             {"COMMKIT_GLOO_ALGORITHM", "ring"}};
  const std::string c = Command(env);
  EXPECT_EQ(c, "COMMKIT_GLOO_ALGORITHM=ring commkit-run -n 4 -- build/bin/commkit-bench allreduce -b 8 -e 1M");
  EXPECT_EQ(c.find("abc"), std::string::npos);
  EXPECT_EQ(c.find("40123"), std::string::npos) << "commkit-run picks its own port on one node";

  env["NNODES"] = "2";
  env["WORLD_SIZE"] = "8";
  env["MASTER_ADDR"] = "node0";
  EXPECT_EQ(Command(env, {"commkit-bench"}),
            "COMMKIT_GLOO_ALGORITHM=ring commkit-run --nnodes 2 --node-rank <0..1> --master-addr node0 "
            "--master-port 40123 -n 4 -- commkit-bench");
}

TEST(BenchReproduce, TorchrunStyle) {
  EnvMap env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}};
  EXPECT_EQ(Command(env, {"commkit-bench"}), "torchrun --nnodes 1 --nproc-per-node 2 --no-python commkit-bench");
  // Plain WORLD_SIZE/RANK (a Kubeflow pod, a hand-made environment): the equivalent torchrun command.
  EnvMap kube{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
              {"NODE_RANK", "1"}, {"MASTER_ADDR", "trainer-0"}, {"MASTER_PORT", "23456"},
              {"KUBERNETES_SERVICE_HOST", "10.0.0.1"}};
  EXPECT_EQ(Command(kube, {"commkit-bench"}),
            "torchrun --nnodes 2 --nproc-per-node 2 --node-rank <0..1> --master-addr trainer-0 --master-port 23456 "
            "--no-python commkit-bench");
}

TEST(BenchReproduce, OpenMpi) {
  EnvMap env{{"OMPI_COMM_WORLD_SIZE", "2"},
             {"OMPI_COMM_WORLD_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"OMPI_COMM_WORLD_NODE_RANK", "1"},
             {"OMPI_MCA_ess_base_jobid", "1244463105"},
             {"OMPI_MCA_orte_num_nodes", "1"},
             {"OMPI_MCA_rmaps_base_oversubscribe", "1"},  // mpirun --oversubscribe
             {"OMPI_MCA_coll_tuned_allreduce_algorithm", "4"},
             {"COMMKIT_MPI_COLLECTIVES", "nbc"},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", "29702"}};
  EXPECT_EQ(Command(env, kArgv, false, /*as_root=*/true),
            "mpirun --allow-run-as-root -np 2 --mca coll_tuned_allreduce_algorithm 4 "
            "--mca rmaps_base_oversubscribe 1 -x COMMKIT_MPI_COLLECTIVES=nbc -x MASTER_ADDR=127.0.0.1 "
            "-x MASTER_PORT=29702 build/bin/commkit-bench allreduce -b 8 -e 1M");
  EXPECT_EQ(Command({{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", "0"}}, {"commkit-bench", "a b"}),
            "mpirun -np 3 commkit-bench 'a b'");
}

TEST(BenchReproduce, SlurmAndPmi) {
  EnvMap slurm{{"SLURM_PROCID", "5"},  {"SLURM_NTASKS", "8"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "1"},
               {"SLURM_LOCALID", "1"}, {"SLURM_NNODES", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
               {"SLURM_JOB_NODELIST", "n[1-2]"}, {"UCX_NET_DEVICES", "mlx5_0:1"}};
  EXPECT_EQ(Command(slurm, {"commkit-bench", "allreduce", "-B", "host"}),
            "UCX_NET_DEVICES=mlx5_0:1 srun -N 2 -n 8 commkit-bench allreduce -B host");
  slurm["SLURM_NNODES"] = "1";
  slurm["SLURM_NODEID"] = "0";
  slurm["SLURM_TASKS_PER_NODE"] = "8";
  EXPECT_EQ(Command(slurm, {"commkit-bench"}), "UCX_NET_DEVICES=mlx5_0:1 srun -n 8 commkit-bench");
  EXPECT_EQ(Command({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MASTER_ADDR", "h0"}}, {"commkit-bench"}),
            "MASTER_ADDR=h0 mpiexec -n 3 commkit-bench");
}

TEST(BenchReproduce, MalformedLauncherVariablesFallBackToTheArgv) {
  EXPECT_EQ(Command({{"RANK", "0"}, {"COMMKIT_LOG", "info"}}, {"commkit-bench"}), "COMMKIT_LOG=info commkit-bench");
}

ResultRow Row(std::string backend, std::size_t bytes, const std::string& reproduce) {
  ResultRow r;
  r.backend = std::move(backend);
  r.bytes = bytes;
  r.count = bytes / 4;
  r.op = "sum";
  r.nranks = 2;
  r.warmup = 1;
  r.iters = 5;
  r.out_of_place = {true, 3.0, 1.5, 1.5, 0};
  r.in_place = {true, 6.0, 0.75, 0.75, 0};
  r.reproduce = reproduce;
  return r;
}

// A command with everything CSV and JSON must escape: commas, spaces, single and double quotes.
const std::string kReproduce =
    "COMMKIT_HOST_ALGORITHM=ring mpirun -np 2 -x UCX_TLS='shm, tcp' commkit-bench allreduce --compare host,mpi "
    "--output 'my \"best\" run.csv'";

TEST(BenchReproduce, InEveryOutputFormat) {
  BenchOptions o;
  const std::vector<ResultRow> rows = {Row("host", 8, kReproduce), Row("mpi", 8, kReproduce)};

  o.format = OutputFormat::kTable;
  const std::string table = RenderResults(o, rows, kReproduce, 2);
  EXPECT_TRUE(table.starts_with("# reproduce: " + kReproduce + "\n")) << table;

  o.format = OutputFormat::kJson;
  const std::string json = RenderResults(o, rows, kReproduce, 2);
  auto lines = Split(json, '\n', true);
  ASSERT_EQ(lines.size(), 4u) << json;  // 2 backends x 2 placements; no extra non-measurement line
  for (const std::string& line : lines) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["reproduce"], kReproduce);
    EXPECT_TRUE(j.contains("backend") && j.contains("busbw_gbps")) << line;  // every line is a measurement
  }

  o.format = OutputFormat::kCsv;
  const std::string csv = RenderResults(o, rows, kReproduce, 2);
  auto csv_lines = Split(csv, '\n', true);
  ASSERT_EQ(csv_lines.size(), 5u) << csv;
  const auto header = CsvFields(csv_lines[0]);
  EXPECT_EQ(header.front(), "backend") << "the first line is the header, not a comment";
  EXPECT_EQ(header.back(), "reproduce");
  for (std::size_t i = 1; i < csv_lines.size(); ++i) {
    const auto fields = CsvFields(csv_lines[i]);
    ASSERT_EQ(fields.size(), header.size()) << csv_lines[i];
    EXPECT_EQ(fields.back(), kReproduce);
    EXPECT_EQ(fields[0], i <= 2 ? "host" : "mpi");
  }
}

TEST(BenchReproduce, RowsWithoutACommand) {
  ResultRow r = Row("gloo", 8, "");
  EXPECT_FALSE(nlohmann::json::parse(Split(JsonLines(r), '\n', true)[0]).contains("reproduce"));
  EXPECT_EQ(CsvFields(Split(CsvRows(r), '\n', true)[0]).back(), "");
  EXPECT_EQ(CsvQuote("a\"b,c"), "\"a\"\"b,c\"");
}

}  // namespace
}  // namespace commkit::bench
