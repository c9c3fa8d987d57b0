// The selection table seen from the backends (commkit/comm/tuning.h): a forced choice is what the host
// and gloo backends run, and a malformed COMMKIT_TUNE fails group creation clearly.
#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

TEST(TuneBackends, HostRunsWhatCommkitTuneForces) {
  ScopedEnv cache("COMMKIT_TUNE_CACHE", "off");
  auto run = [](const std::string& spec, std::size_t count, CollectiveAlgorithm expect) {
    ScopedEnv tune_env("COMMKIT_TUNE", spec);
    const std::uint64_t before = tune::RunCount("host", expect);
    RunRanks("host", 2, [&](ProcessGroup& pg) {
      Buffer b(DataType::kFloat32, count);
      for (std::size_t i = 0; i < count; ++i) b.set(i, Value(pg.rank(), i, ReduceKind::kSum));
      COMMKIT_WAIT_OK_WITHIN(pg.Allreduce(nullptr, b.data(), count, DataType::kFloat32, ReduceOp::Sum()),
                             std::chrono::minutes(2));
      for (std::size_t i = 0; i < count; i += 7) ASSERT_EQ(b.at(i), Reference(DataType::kFloat32, ReduceOp::Sum(), 2, i));
    });
    // Both ranks ran the forced algorithm (the group's own fingerprint all-reduce may add more).
    EXPECT_GE(tune::RunCount("host", expect) - before, 2u) << spec;
  };
  run("host.allreduce:*:sliced", 2, CollectiveAlgorithm::kSliced);    // 8 bytes, default would be flat
  run("host.allreduce:*:flat", 1 << 18, CollectiveAlgorithm::kFlat);  // 1 MiB, default would be sliced
  // Without the override the default runs.
  const std::uint64_t flat_before = tune::RunCount("host", CollectiveAlgorithm::kFlat);
  run("", 2, CollectiveAlgorithm::kFlat);
  EXPECT_GT(tune::RunCount("host", CollectiveAlgorithm::kFlat), flat_before);
}

// The single-copy all-reduce (each rank reads its slice of every peer's input, then the reduced
// slices) forced at every size: odd counts whose slices end mid-line, in place and out of place,
// threads and processes, 2-4 ranks; PREMUL_SUM falls back to sliced.
TEST(TuneBackends, HostSingleCopyAllreduceIsExact) {
  ScopedEnv cache("COMMKIT_TUNE_CACHE", "off");
  ScopedEnv tune_env("COMMKIT_TUNE", "host.allreduce:*:single_copy");
  const std::uint64_t read_before = tune::RunCount("host", CollectiveAlgorithm::kSingleCopy);
  const std::uint64_t sliced_before = tune::RunCount("host", CollectiveAlgorithm::kSliced);
  auto body = [](ProcessGroup& pg) {
    const int p = pg.size();
    for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16})
      for (ReduceOp op : {ReduceOp::Sum(), ReduceOp::Avg(), ReduceOp::Max(), ReduceOp::PreMulSum(2.0)})
        for (std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{100003}})
          for (bool in_place : {true, false}) {
            Buffer in(t, n), out(t, n);
            for (std::size_t i = 0; i < n; ++i) in.set(i, Value(pg.rank(), i, op.kind));
            COMMKIT_WAIT_OK_WITHIN(pg.Allreduce(in_place ? nullptr : in.data(), in_place ? in.data() : out.data(), n, t, op),
                                   std::chrono::minutes(2));
            const Buffer& got = in_place ? in : out;
            for (std::size_t i = 0; i < n; ++i) {
              const double want = Reference(t, op, p, i);
              ASSERT_NEAR(got.at(i), want, Tolerance(t, want)) << ToString(t) << " " << op.ToString() << " n=" << n << " i=" << i;
              if (!in_place) {
                ASSERT_EQ(in.at(i), Value(pg.rank(), i, op.kind)) << "input changed at " << i;
              }
            }
          }
  };
  RunRanks("host", 2, body);
  RunRanks("host", 3, body);
  RunRanks("host+fork", 2, body);
  RunRanks("host+fork", 4, body);
  if (World().size > 0) return;
  // Counted in this process, by its 2 + 3 thread ranks (forked ranks count in their own): 3 types x
  // 3 ops x 3 sizes x 2 placements each read from the peers; PREMUL_SUM's 3 x 3 x 2 ran sliced.
  EXPECT_GE(tune::RunCount("host", CollectiveAlgorithm::kSingleCopy) - read_before, 5u * 3 * 3 * 3 * 2);
  EXPECT_GE(tune::RunCount("host", CollectiveAlgorithm::kSliced) - sliced_before, 5u * 3 * 3 * 2);
}

#if COMMKIT_HAVE_GLOO
TEST(TuneBackends, GlooRunsWhatCommkitTuneForces) {
  ScopedEnv cache("COMMKIT_TUNE_CACHE", "off");
  for (auto [spec, algo] : {std::pair{"gloo.allreduce:*:bcube", CollectiveAlgorithm::kBcube},
                            std::pair{"allreduce:0-1K:ring", CollectiveAlgorithm::kRing}}) {
    ScopedEnv tune_env("COMMKIT_TUNE", spec);
    const std::uint64_t before = tune::RunCount("gloo", algo);
    RunRanks("gloo", 2, [&](ProcessGroup& pg) {
      Buffer b(DataType::kInt32, 5);
      for (std::size_t i = 0; i < 5; ++i) b.set(i, Value(pg.rank(), i, ReduceKind::kSum));
      COMMKIT_WAIT_OK_WITHIN(pg.Allreduce(nullptr, b.data(), 5, DataType::kInt32, ReduceOp::Sum()),
                             std::chrono::minutes(2));
      for (std::size_t i = 0; i < 5; ++i) ASSERT_EQ(b.at(i), Reference(DataType::kInt32, ReduceOp::Sum(), 2, i));
    });
    EXPECT_GE(tune::RunCount("gloo", algo) - before, 2u) << spec;  // default at 20 bytes: halving_doubling
  }
}
#endif

TEST(TuneBackends, MalformedCommkitTuneFailsGroupCreationClearly) {
  ExpectInvalidSetting("host", "COMMKIT_TUNE", "allreduce:0-64K:rign", {"unknown algorithm 'rign'", "host backend"});
}

}  // namespace
}  // namespace commkit::testing
