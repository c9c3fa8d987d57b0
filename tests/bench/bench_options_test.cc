// commkit-bench argument parsing: sizes, sweeps, iteration scaling, and every argument error.
#include <gtest/gtest.h>

#include "commkit/bench/options.h"

namespace commkit::bench {
namespace {

Result<BenchOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "commkit-bench");
  return ParseBenchArgs(args);
}

void ExpectError(std::vector<std::string> args, const std::string& fragment) {
  auto r = Parse(args);
  ASSERT_FALSE(r.ok()) << fragment;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(BenchOptions, ParseSizeSuffixes) {
  EXPECT_EQ(*ParseSize("8"), 8u);
  EXPECT_EQ(*ParseSize("64K"), 64u * 1024);
  EXPECT_EQ(*ParseSize("64k"), 64u * 1024);
  EXPECT_EQ(*ParseSize("1M"), 1u << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1.5K"), 1536u);
  EXPECT_EQ(*ParseSize("16KiB"), 16u * 1024);
  EXPECT_EQ(*ParseSize("4MB"), 4u << 20);
  EXPECT_EQ(*ParseSize(" 128 "), 128u);
  for (const char* bad : {"", "K", "abc", "-8", "1.3", "12Q", "1e400", "nan"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(BenchOptions, SweepByFactorAndIncrement) {
  EXPECT_EQ(*SizeSweep(8, 64, 2, 0), (std::vector<std::size_t>{8, 16, 32, 64}));
  EXPECT_EQ(*SizeSweep(8, 100, 2, 0), (std::vector<std::size_t>{8, 16, 32, 64}));
  EXPECT_EQ(*SizeSweep(100, 400, 0, 100), (std::vector<std::size_t>{100, 200, 300, 400}));
  EXPECT_EQ(*SizeSweep(1, 1, 2, 0), (std::vector<std::size_t>{1}));
  EXPECT_EQ(SizeSweep(1, 3, 1.1, 0)->size(), 3u);  // always progresses by at least one byte
  EXPECT_FALSE(SizeSweep(0, 8, 2, 0).ok());
  EXPECT_FALSE(SizeSweep(64, 8, 2, 0).ok());
  EXPECT_FALSE(SizeSweep(8, 64, 1.0, 0).ok());
  EXPECT_FALSE(SizeSweep(1, 1 << 30, 0, 1).ok());  // too many sizes
}

TEST(BenchOptions, FewerIterationsForLargeSizes) {
  BenchOptions o;
  o.iters = 20;
  o.warmup = 5;
  o.large_bytes = 1 << 20;
  EXPECT_EQ(ItersForSize(o, 1024).iters, 20);
  EXPECT_EQ(ItersForSize(o, 1 << 20).iters, 20);
  EXPECT_EQ(ItersForSize(o, 4 << 20).iters, 5);
  EXPECT_EQ(ItersForSize(o, 4 << 20).warmup, 2);
  EXPECT_EQ(ItersForSize(o, 1ull << 32).iters, 2);
  EXPECT_EQ(ItersForSize(o, 1ull << 32).warmup, 1);
}

TEST(BenchOptions, DefaultsAndFullCommandLine) {
  auto d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->collective, BenchCollective::kAllreduce);
  // "auto": the first backend available here for host memory, not gloo (which may not be built).
  EXPECT_EQ(d->backends, std::vector<std::string>{"auto"});
  EXPECT_TRUE(d->in_place && d->out_of_place && d->check);
  EXPECT_EQ(d->ranks_per_process, 1);
  EXPECT_EQ(d->blocking, 0);
  EXPECT_EQ(d->graph_launches, 0);
  EXPECT_EQ(d->aggregate, TimeAggregate::kMax);

  auto o = Parse({"reduce_scatter", "-b", "1K", "-e", "1M", "-f", "4", "-d", "int32", "-o", "max", "-w", "1", "-n",
                  "3", "--format", "csv", "--compare", "gloo, mpi", "--local", "2", "-c", "0"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->collective, BenchCollective::kReduceScatter);
  EXPECT_EQ(o->min_bytes, 1024u);
  EXPECT_EQ(o->max_bytes, 1u << 20);
  EXPECT_EQ(o->step_factor, 4);
  EXPECT_EQ(o->dtype, DataType::kInt32);
  EXPECT_EQ(o->op.kind, ReduceKind::kMax);
  EXPECT_EQ(o->warmup, 1);
  EXPECT_EQ(o->iters, 3);
  EXPECT_EQ(o->format, OutputFormat::kCsv);
  EXPECT_EQ(o->backends, (std::vector<std::string>{"gloo", "mpi"}));
  EXPECT_EQ(o->local_ranks, 2);
  EXPECT_FALSE(o->check);
  EXPECT_TRUE(o->mismatch_check);
  EXPECT_FALSE(Parse({"--mismatch-check", "0"})->mismatch_check);
}

TEST(BenchOptions, NcclTestsDeviceOptions) {
  auto o = Parse({"-B", "nccl", "--raw", "nccl", "-g", "4", "-G", "10", "-a", "1"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->backends, std::vector<std::string>{"nccl"});
  EXPECT_EQ(o->raw, "nccl");
  EXPECT_EQ(o->ranks_per_process, 4);
  EXPECT_EQ(o->graph_launches, 10);
  EXPECT_EQ(o->aggregate, TimeAggregate::kMean);
  EXPECT_EQ(Parse({"-z", "1"})->blocking, 1);
  EXPECT_EQ(Parse({"--blocking", "2"})->blocking, 2);
  EXPECT_EQ(Parse({"--average", "0"})->aggregate, TimeAggregate::kRank0);
  EXPECT_EQ(Parse({"-a", "2"})->aggregate, TimeAggregate::kMin);
  EXPECT_EQ(Parse({"--local", "2", "-g", "2"})->local_ranks, 2);
  ExpectError({"-z", "3"}, "-z/--blocking is 0, 1 or 2");
  ExpectError({"-G", "-1"}, "-G/--cudagraph");
  ExpectError({"-G", "5", "-z", "1"}, "drop -z");
  ExpectError({"-a", "4"}, "-a/--average");
  ExpectError({"-g", "0"}, "-g/--ngpus");
  ExpectError({"--local", "2", "-g", "4"}, "give one of them");
}

TEST(BenchOptions, ProgressOnlyOnARealTerminal) {
  EXPECT_TRUE(ProgressAllowed({}, true));
  EXPECT_FALSE(ProgressAllowed({}, false));
  // NO_COLOR (any value, even empty) and TERM=dumb turn terminal decorations off.
  EXPECT_FALSE(ProgressAllowed({{"NO_COLOR", ""}}, true));
  EXPECT_FALSE(ProgressAllowed({{"NO_COLOR", "1"}}, true));
  EXPECT_FALSE(ProgressAllowed({{"TERM", "dumb"}}, true));
  EXPECT_TRUE(ProgressAllowed({{"TERM", "xterm-256color"}}, true));
  // Open MPI (and PMI/Slurm launchers) give ranks a pseudo-terminal even when the job's output is a
  // file: the rank's isatty() is not the user's terminal.
  EXPECT_FALSE(ProgressAllowed({{"OMPI_COMM_WORLD_RANK", "0"}}, true));
  EXPECT_FALSE(ProgressAllowed({{"PMI_RANK", "0"}}, true));
  EXPECT_FALSE(ProgressAllowed({{"SLURM_PROCID", "0"}}, true));
  // commkit-run hands its children its own stderr: their isatty() is the truth.
  EXPECT_TRUE(ProgressAllowed({{"COMMKIT_LAUNCHER", "commkit-run"}}, true));
}

TEST(BenchOptions, OnePlacementCollectives) {
  auto a = Parse({"alltoall"});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->in_place);
  EXPECT_TRUE(a->out_of_place);
  auto b = Parse({"broadcast"});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->in_place);
  EXPECT_FALSE(b->out_of_place);
  ExpectError({"alltoall", "--in-place-only"}, "no in-place variant");
  ExpectError({"broadcast", "--out-of-place-only"}, "one buffer only");
}

TEST(BenchOptions, ArgumentErrorsAreClear) {
  ExpectError({"allreduse"}, "unknown collective 'allreduse'");
  ExpectError({"-b", "1M", "-e", "1K"}, "smaller than -b");
  ExpectError({"-b", "0"}, "at least 1 byte");
  ExpectError({"-b", "12Q"}, "bad size '12Q'");
  ExpectError({"-f", "1"}, "-f/--stepfactor must be > 1");
  ExpectError({"-d", "float128"}, "unknown data type 'float128'");
  ExpectError({"-o", "xor"}, "unknown reduction 'xor'");
  ExpectError({"-n", "0"}, "-n/--iters must be >= 1");
  ExpectError({"-w", "-1"}, "-w/--warmup_iters");
  ExpectError({"-r", "-2"}, "-r/--root");
  ExpectError({"--format", "xml"}, "--format 'xml'");
  ExpectError({"--compare", "gloo,,mpi"}, "empty backend name");
  ExpectError({"--compare", "gloo,gloo"}, "twice");
  ExpectError({"--raw", "nccl2"}, "--raw 'nccl2'");
  ExpectError({"--local", "-1"}, "--local");
  ExpectError({"--in-place-only", "--out-of-place-only"}, "exclude each other");
  ExpectError({"--no-such-flag"}, "see --help");
  ExpectError({"-n", "many"}, "see --help");
}

TEST(BenchOptions, HelpIsNotAnError) {
  auto h = Parse({"--help"});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kAborted);
  EXPECT_NE(h.status().message().find("--compare"), std::string::npos);
  EXPECT_NE(h.status().message().find("--minbytes"), std::string::npos);
}

TEST(BenchOptions, DataTypesAndOps) {
  EXPECT_EQ(*ParseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(*ParseDataType("BF16"), DataType::kBFloat16);
  EXPECT_EQ(*ParseDataType("double"), DataType::kFloat64);
  EXPECT_EQ(*ParseDataType("uint8"), DataType::kUInt8);
  EXPECT_EQ(ParseReduceOp("avg")->kind, ReduceKind::kAvg);
  EXPECT_EQ(ParseReduceOp("PROD")->kind, ReduceKind::kProd);
}

}  // namespace
}  // namespace commkit::bench

namespace commkit::bench {
namespace {

// --plan prints the selection table and --calibrate measures every algorithm (docs/tuning.md): flags
// that default off, calibrate all-reduce, all-gather and broadcast only, and not together.
TEST(BenchOptions, PlanAndCalibrate) {
  auto d = ParseBenchArgs({"commkit-bench"});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->plan);
  EXPECT_FALSE(d->calibrate);
  auto p = ParseBenchArgs({"commkit-bench", "allreduce", "--plan", "--compare", "host,gloo"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->plan);
  auto c = ParseBenchArgs({"commkit-bench", "allreduce", "--calibrate"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->calibrate);
  auto gather = ParseBenchArgs({"commkit-bench", "allgather", "--calibrate"});
  ASSERT_TRUE(gather.ok()) << gather.status().ToString();
  auto bcast = ParseBenchArgs({"commkit-bench", "broadcast", "--calibrate"});
  ASSERT_TRUE(bcast.ok()) << bcast.status().ToString();
  auto other = ParseBenchArgs({"commkit-bench", "reduce_scatter", "--calibrate"});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("allreduce, allgather and broadcast"), std::string::npos)
      << other.status().message();
  EXPECT_NE(other.status().message().find("not reduce_scatter"), std::string::npos) << other.status().message();
  auto both = ParseBenchArgs({"commkit-bench", "allreduce", "--plan", "--calibrate"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exclude each other"), std::string::npos) << both.status().message();
}

}  // namespace
}  // namespace commkit::bench
