// The conformance suite on the MPI backend. Run without a launcher it covers 1 rank; under
// `mpirun -np N` with COMMKIT_TEST_PROCESSES=1 each process is one rank (see pg.cmake).
#include "commkit/comm_mpi/mpi.h"
#include "pg_conformance.h"

namespace commkit::testing {
namespace {

// Referencing the registration hook keeps libcommkit_comm_mpi linked (it registers "mpi").
[[maybe_unused]] const auto kKeepMpiLinked = &commkit_register_mpi_backend;


INSTANTIATE_TEST_SUITE_P(Mpi, PgConformance, ::testing::Combine(::testing::Values("mpi"), ::testing::Range(1, 5)),
                         PgParamName);

TEST(MpiBackend, ClearErrorWhenNotLaunchedByMpirun) {
  if (ProcessMode()) GTEST_SKIP() << "runs outside mpirun only";
  auto store = std::make_shared<HashStore>();
  auto pg = ProcessGroup::Create(store, 0, 2, {.backend = "mpi"});
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pg.status().message().find("not launched by mpirun or srun"), std::string::npos) << pg.status().message();
}

}  // namespace
}  // namespace commkit::testing
