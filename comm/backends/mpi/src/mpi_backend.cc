// The MPI backend: every collective as a nonblocking MPI call (MPI-3) polled until its deadline, so a
// rank that never arrives turns into a timeout the process group can diagnose instead of a hang.
// After a failure, what MPI can cancel is cancelled and what it cannot (started collectives, sends)
// keeps owned memory until it completes or the job ends (mpi_runtime.h). mpi.h is included only in
// this backend's sources.
#include "commkit/comm/mpi/mpi_backend.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "commkit/comm/registry.h"
#include "commkit/common/env.h"
#include "commkit/common/strings.h"
#include "mpi_backend_impl.h"

namespace commkit::comm::mpi {
namespace {

// Which launcher started us (empty when none did).
std::string Launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                          "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return var;
  }
  return {};
}

// How long a wait spins on MPI_Test before it starts yielding the core (COMMKIT_MPI_SPIN_US).
constexpr std::int64_t kDefaultSpinUs = 100;

std::string NotLaunchedReason() {
  return "not launched by mpirun/srun (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK is set); start the job "
         "with `mpirun -np N prog` (as root add --allow-run-as-root, more ranks than cores --oversubscribe) or "
         "`srun --mpi=pmix`, set COMMKIT_MPI_SINGLETON=1 for a 1-rank run without a launcher, or use backend gloo";
}

bool SingletonAllowed() {
  const char* v = std::getenv("COMMKIT_MPI_SINGLETON");
  return v != nullptr && std::string_view(v) == "1";
}

Result<std::unique_ptr<Backend>> CreateMpiBackend(const BackendContext& ctx) {
  if (Launcher().empty() && !SingletonAllowed()) return Status::Unavailable(StrCat("mpi backend: ", NotLaunchedReason()));
  // auto: every collective meets in shared-memory slots first when all ranks are on this node (small
  // all-reduce, all-gather, reduce-scatter and broadcast move their data there too); all-reduce,
  // reduce-scatter, all-gather, all-to-all, broadcast (<= 1 MiB, any size at two ranks) and barrier
  // otherwise on point-to-point messages; p2p: the same without the slots; nbc: every collective as
  // MPI's nonblocking collective (libnbc in Open MPI).
  auto collectives_env = EnvChoice("COMMKIT_MPI_COLLECTIVES", {"auto", "p2p", "nbc"});
  if (!collectives_env.ok())
    return collectives_env.status().WithContext(
        "mpi backend: COMMKIT_MPI_COLLECTIVES selects how collectives run");
  std::optional<std::string> collectives = collectives_env->value_or("auto");
  auto spin_us = EnvIntOr("COMMKIT_MPI_SPIN_US", kDefaultSpinUs, 0, 10'000'000);
  if (!spin_us.ok()) return spin_us.status().WithContext("mpi backend: COMMKIT_MPI_SPIN_US is how long a wait spins");
  COMMKIT_RETURN_IF_ERROR(EnsureInitialized());
  int world_rank = 0, world_size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  int rc;
  {
    CallGuard g;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  if (ctx.rank != world_rank || ctx.size != world_size)
    return Status::InvalidArgument(StrCat("mpi backend: the process group was created as rank ", ctx.rank, " of ",
                                          ctx.size, " but MPI_COMM_WORLD has this process as rank ", world_rank, " of ",
                                          world_size, "; create the group with MPI's rank and size "
                                          "(ProcessGroup::FromEnvironment reads them from mpirun) and use Split() for sub-groups"));
  {
    CallGuard g;
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);  // a private communicator per group: no interference with the app
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  if (rc != MPI_SUCCESS) return Status::BackendError(StrCat("mpi backend: MPI_Comm_dup failed: ", MpiError(rc)));
  auto table = MpiTable(ctx);
  if (!table.ok()) {
    CallGuard g;
    MPI_Comm_free(&comm);
    return table.status();
  }
  return std::unique_ptr<Backend>(new MpiBackend(comm, world_rank, world_size, ctx.group_name, *collectives != "nbc",
                                                 *collectives == "auto",
                                                 std::chrono::microseconds(*spin_us), std::move(*table)));
}

}  // namespace

Result<tune::Table> MpiTable(const BackendContext& ctx) {
  auto table = tune::Table::ForBackend("mpi", ctx, {ctx.size, ctx.size, 1});
  if (!table.ok()) return table.status().WithContext(StrCat("mpi backend, group ", ctx.group_name));
  return table;
}

BackendInfo MpiBackendInfo() {
  BackendInfo info;
  info.name = "mpi";
  info.memory = MemoryKind::kHost;
  std::string launcher = Launcher();
  info.available = !launcher.empty() || SingletonAllowed();
  if (!info.available) info.reason = NotLaunchedReason();
  info.create = &CreateMpiBackend;
  return info;
}

}  // namespace commkit::comm::mpi

extern "C" __attribute__((visibility("default"))) void commkit_register_mpi_backend(commkit::Registry* registry) {
  registry->Register(commkit::comm::mpi::MpiBackendInfo());
}
