// The process-group conformance suite and failure semantics on the MPI backend, one process per rank.
//
// Registered twice (tests/comm/pg.cmake): run directly (label unit) it checks that "mpi" is listed
// unavailable with the reason and that creating it fails with that reason; run under
// `mpirun --allow-run-as-root --oversubscribe -np N` (label mp) it runs the whole conformance suite and
// the fault tests over the launcher's world, with a FileStore in a per-job temporary directory.
#include <cstdlib>
#include <filesystem>

#include "commkit/comm/file_store.h"
#include "commkit/comm/registry.h"
#include "commkit/comm_mpi/mpi_backend.h"
#include "pg_conformance.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}
bool Launched() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::vector<PgParam> MpiParams() {
  if (!Launched()) return {};
  return {PgParam{"mpi", EnvInt("OMPI_COMM_WORLD_SIZE", 1)}};
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PgConformance);
INSTANTIATE_TEST_SUITE_P(Mpi, PgConformance, ::testing::ValuesIn(MpiParams()), PgParamName);

TEST(PgMpi, UnavailableWithTheReasonWhenNotLaunchedByMpirun) {
  if (Launched()) GTEST_SKIP() << "launched by mpirun";
  ScopedEnv no_singleton("COMMKIT_MPI_SINGLETON", std::nullopt);
  bool listed = false;
  for (const auto& b : Registry::Default().List()) {
    if (b.name != "mpi") continue;
    listed = true;
    EXPECT_FALSE(b.available);
    EXPECT_NE(b.reason.find("not launched by mpirun/srun"), std::string::npos) << b.reason;
  }
  EXPECT_TRUE(listed);
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, {.backend = "mpi"});
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pg.status().message().find("not launched by mpirun/srun"), std::string::npos) << pg.status().message();
  EXPECT_NE(pg.status().message().find("mpirun -np N"), std::string::npos) << pg.status().message();
}

TEST(PgMpi, GroupMustMatchTheLaunchersWorld) {
  if (!Launched()) GTEST_SKIP() << "needs mpirun";
  const int size = World().size;
  // A wrong size is refused before any communication, on every rank alike.
  auto store = std::make_shared<PrefixStore>("wrong-size", World().store);
  auto pg = ProcessGroup::Create(store, World().rank, size + 1, {.backend = "mpi", .timeout = 20s});
  ASSERT_FALSE(pg.ok());
  EXPECT_NE(pg.status().message().find("MPI_COMM_WORLD has this process as rank"), std::string::npos)
      << pg.status().message();
}

TEST(PgMpi, MismatchedCollectivesAreReportedOnEveryRank) {
  if (!Launched() || World().size < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  RunRanks("mpi", World().size, [](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    std::size_t n = pg.rank() == 1 ? 7 : 8;
    auto work = pg.Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 30s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 0: allreduce f32 sum count=8"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: allreduce f32 sum count=7"), std::string::npos) << s.message();
    // Nothing was sent: the group stays usable.
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Wait());
    EXPECT_EQ(buf[0], static_cast<float>(pg.size()));
  });
}

TEST(PgMpi, SplitMapsToCommSplitAndNoColorRanksStayOut) {
  if (!Launched()) GTEST_SKIP() << "needs mpirun";
  RunRanks("mpi", World().size, [](ProcessGroup& pg) {
    // Rank 0 joins no group; the others form one, ordered by descending rank.
    auto sub = pg.Split(pg.rank() == 0 ? -1 : 5, -pg.rank());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    if (pg.rank() == 0) {
      EXPECT_EQ(*sub, nullptr);
      return;
    }
    ASSERT_NE(*sub, nullptr);
    EXPECT_EQ((*sub)->size(), pg.size() - 1);
    EXPECT_EQ((*sub)->rank(), pg.size() - 1 - pg.rank());
    EXPECT_EQ((*sub)->backend_name(), "mpi");
    std::int32_t v = pg.rank();
    COMMKIT_EXPECT_OK((*(*sub)->Allreduce(nullptr, &v, 1, DataType::kInt32, ReduceOp::Max()))->Wait());
    EXPECT_EQ(v, pg.size() - 1);
  });
}

// A rank delayed past the others' timeout is named; the timed-out group is then unusable (its pending
// MPI collective cannot be cancelled) and is left behind; later groups work normally.
TEST(PgMpi, ARankDelayedPastTheTimeoutIsNamed) {
  if (!Launched() || World().size < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  RunRanks("mpi", World().size, [](ProcessGroup& pg) {
    std::vector<float> buf(64, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 0) {
      std::this_thread::sleep_for(5s);  // never joins allreduce #2
      return;
    }
    auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 2s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(60s);
    ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("ranks that never reached allreduce #2: 0 (last at #1"), std::string::npos)
        << s.message();
    // The group cannot be used again (MPI cannot cancel the pending collective): later calls fail fast.
    auto again = pg.Barrier({.timeout = 2s});
    ASSERT_TRUE(again.ok());
    Status b = (*again)->Wait(30s);
    EXPECT_FALSE(b.ok());
    EXPECT_NE(b.message().find("unusable"), std::string::npos) << b.message();
  });
}

}  // namespace
}  // namespace commkit::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Explicit registration also keeps the link to libcommkit_comm_mpi (the registry finds it by dlsym).
  commkit::Registry::Default().Register(commkit::MpiBackendInfo());
  std::filesystem::path dir;
  auto& world = commkit::testing::World();
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    world.rank = commkit::testing::EnvInt("OMPI_COMM_WORLD_RANK", 0);
    world.size = commkit::testing::EnvInt("OMPI_COMM_WORLD_SIZE", 1);
    const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
    if (job == nullptr) job = std::getenv("PMIX_NAMESPACE");
    dir = std::filesystem::temp_directory_path() / (std::string("commkit-pg-mpi-") + (job ? job : "job"));
    auto store = commkit::FileStore::Open(dir);
    if (!store.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", world.rank, store.status().ToString().c_str());
      return 2;
    }
    world.store = std::shared_ptr<commkit::Store>(std::move(store).value());
  }
  int rc = RUN_ALL_TESTS();
  if (world.size > 0) {
    // Everyone is done with the store once a last group's barrier passes; then rank 0 removes it.
    {
      auto store = std::make_shared<commkit::PrefixStore>("final", world.store);
      auto pg = commkit::ProcessGroup::Create(store, world.rank, world.size, {.backend = "mpi"});
      if (pg.ok()) {
        auto work = (*pg)->Barrier();
        if (work.ok()) (void)(*work)->Wait(std::chrono::seconds(60));
      }
    }
    if (world.rank == 0) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
  return rc;
}
