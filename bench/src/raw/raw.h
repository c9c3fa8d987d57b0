// Internal: factories of the per-library raw baselines (each defined in its own raw/<lib>.cc).
#pragma once

#include "commkit/bench/raw.h"

namespace commkit::bench::raw {

Result<std::unique_ptr<RawCollective>> MakeMpi(const BenchOptions& options, int rank, int nranks);
// MPI_Abort when MPI is initialised and not finalised (see AbortMpiOnError).
void AbortMpi(int code);
// commkit's host backend through Backend::Run, without ProcessGroup (always built).
Result<std::unique_ptr<RawCollective>> MakeHost(const BenchOptions& options, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store);
// NCCL on the rank's device buffers and stream (device.h).
Result<std::unique_ptr<RawCollective>> MakeNccl(const BenchOptions& options, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store, Device* device);
Result<std::unique_ptr<RawCollective>> MakeGloo(const BenchOptions& options, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store);

}  // namespace commkit::bench::raw
