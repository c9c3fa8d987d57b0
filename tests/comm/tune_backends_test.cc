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
