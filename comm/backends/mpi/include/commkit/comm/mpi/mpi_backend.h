// The MPI backend (host buffers; Open MPI). Link commkit::comm_mpi; the backend then appears as "mpi"
// in Registry::Default() (registered through the exported commkit_register_mpi_backend()). Linkers
// using --as-needed (Debian/Ubuntu toolchains) drop a library the program never references: call
// `Registry::Default().Register(comm::mpi::MpiBackendInfo())` once in main() to keep it (and be explicit).
//
// - Works when the program was launched by mpirun/mpiexec/srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
//   PMIX_RANK...); otherwise "mpi" is listed as unavailable with the reason.
// - The process group's rank/size must equal MPI_COMM_WORLD's (the group's world is MPI's world).
// - MPI is initialised on first use with MPI_THREAD_MULTIPLE; when the library grants less, calls are
//   serialised process-wide and a warning is logged. MPI_Finalize runs at exit when commkit
//   initialised MPI.
// - Every operation is a nonblocking MPI call polled until its timeout; a timed-out operation leaves
//   the backend unusable (MPI cannot cancel a collective) and later calls fail fast.
#pragma once

#include "commkit/comm/backend_info.h"

namespace commkit {
class Registry;
}  // namespace commkit

namespace commkit::comm::mpi {

// The registry entry for "mpi": available, or the reason it is not (e.g. not launched by mpirun).
BackendInfo MpiBackendInfo();

}  // namespace commkit::comm::mpi

extern "C" void commkit_register_mpi_backend(commkit::Registry* registry);
