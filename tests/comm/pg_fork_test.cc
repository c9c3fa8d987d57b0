// Ranks as processes: the conformance suite over forked processes and a TcpStore (gloo), and the
// failure semantics that only processes can show: a rank killed before or during a collective, a rank
// delayed past the timeout. Every wait is bounded (ForkRanks kills children after its limit).
#include <csignal>

#include "pg_conformance.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

INSTANTIATE_TEST_SUITE_P(GlooFork, PgConformance,
                         ::testing::Combine(::testing::Values("gloo+fork"), ::testing::Values(2, 3)), PgParamName);

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The process-level fault suite, for every backend of host buffers.
class PgForkFaults : public ::testing::TestWithParam<std::string> {};

// Survivors of a collective that lost a rank: an error naming the op and the dead rank, promptly.
int ExpectFailureNaming(ProcessGroup& pg, std::vector<float>& buf, const std::string& dead) {
  auto start = std::chrono::steady_clock::now();
  auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 8s});
  EXPECT_TRUE(work.ok());
  if (!work.ok()) return 1;
  Status s = (*work)->Wait(60s);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "allreduce #2")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), dead)) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 40s) << s.ToString();
  return ::testing::Test::HasFailure() ? 1 : 0;
}

TEST_P(PgForkFaults, ARankKilledBeforeTheCollectiveIsNamed) {
  auto codes = ForkRanks(GetParam(), 3, [](ProcessGroup& pg) {
    std::vector<float> buf(1024, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 2) {
      std::this_thread::sleep_for(1500ms);  // the others are inside allreduce #2 by now
      std::raise(SIGKILL);
    }
    return ExpectFailureNaming(pg, buf, "ranks that never reached allreduce #2: 2 (last at #1");
  });
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], -SIGKILL);
}

TEST_P(PgForkFaults, ARankKilledInsideTheCollectiveIsNamed) {
  auto codes = ForkRanks(GetParam(), 3, [](ProcessGroup& pg) {
    // 4 MiB: more than one round of the host backend's shared-memory slots, so the collective still
    // needs rank 1 after it entered (a small one could finish from what rank 1 already posted).
    std::vector<float> buf(1 << 20, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 1) {
      // Enters allreduce #2 (which cannot finish: rank 2 is late) and dies inside it.
      std::thread([] {
        std::this_thread::sleep_for(700ms);
        std::raise(SIGKILL);
      }).detach();
      auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 30s});
      if (work.ok()) (void)(*work)->Wait(30s);
      std::this_thread::sleep_for(30s);
      return 3;  // not reached
    }
    if (pg.rank() == 2) std::this_thread::sleep_for(2500ms);
    return ExpectFailureNaming(pg, buf, "ranks that stopped responding: 1 (inside #2");
  });
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], -SIGKILL);
  EXPECT_EQ(codes[2], 0);
}

TEST_P(PgForkFaults, ARankDelayedPastTheTimeoutIsNamed) {
  auto codes = ForkRanks(GetParam(), 3, [](ProcessGroup& pg) {
    std::vector<float> buf(64, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 0) {
      std::this_thread::sleep_for(5s);  // past the others' 2 s timeout, then leaves without joining
      return 0;
    }
    auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 2s});
    EXPECT_TRUE(work.ok());
    if (!work.ok()) return 1;
    Status s = (*work)->Wait(60s);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "allreduce #2")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "ranks that never reached allreduce #2: 0 (last at #1")) << s.ToString();
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST_P(PgForkFaults, MismatchAcrossProcessesIsReportedOnEveryRank) {
  auto codes = ForkRanks(GetParam(), 2, [](ProcessGroup& pg) {
    std::int32_t v = 1;
    auto work = pg.rank() == 0 ? pg.Broadcast(&v, 1, DataType::kInt32, 0, {.timeout = 20s})
                               : pg.Broadcast(&v, 1, DataType::kInt32, 1, {.timeout = 20s});
    EXPECT_TRUE(work.ok());
    if (!work.ok()) return 1;
    Status s = (*work)->Wait();
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 0: broadcast i32 count=1 root=0")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "rank 1: broadcast i32 count=1 root=1")) << s.message();
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Backends, PgForkFaults, ::testing::Values("gloo", "host"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace commkit::testing
