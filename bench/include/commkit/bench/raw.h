// --raw baselines: the same collective called on the underlying library directly (MPI_Allreduce, ...)
// in the same binary, so that the process-group wrapper's overhead is measured side by side.
// The library headers appear only in bench/src/raw/<lib>.cc, each compiled only when the library
// was found at configure time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/bench/runner.h"
#include "commkit/comm/store.h"

namespace commkit::bench {

class Device;  // bench/src/device/device.h: the rank's GPU for device backends

// The libraries compiled into this build ("host", "mpi", "gloo", "nccl").
std::vector<std::string> RawLibraries();

// For a rank about to exit on an error while MPI is initialised in this process (by --raw mpi or the
// mpi backend): MPI_Abort(MPI_COMM_WORLD, code), so that mpirun stops the other ranks. Returning
// instead runs MPI_Finalize at exit, which waits for the ranks still blocked in an MPI call that needs
// this one (e.g. MPI_Comm_dup when the next backend's group is created): the job hangs instead of
// failing. Does nothing when MPI is not compiled in, not initialised or already finalised.
void AbortMpiOnError(int code);

// A raw baseline for `lib` running options.collective on `nranks` ranks where this process is `rank`
// (must match the library's own rank numbering). Unavailable when the library is not compiled in or
// not launched suitably (MPI outside mpirun/srun, or --local threads); NotSupported for a
// collective/type/op the library lacks.
// `store` is the job's store (gloo and nccl connect through it; mpi ignores it). `device` is the rank's
// GPU when the buffers are device memory (required by "nccl", which enqueues on its stream).
Result<std::unique_ptr<RawCollective>> MakeRawCollective(std::string_view lib, const BenchOptions& options, int rank,
                                                         int nranks, std::shared_ptr<Store> store = nullptr,
                                                         Device* device = nullptr);

}  // namespace commkit::bench
