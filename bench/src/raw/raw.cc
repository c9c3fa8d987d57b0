#include "raw/raw.h"

#include "commkit/common/strings.h"

namespace commkit::bench {

std::vector<std::string> RawLibraries() {
  std::vector<std::string> libs{"host"};
#if defined(COMMKIT_BENCH_RAW_MPI)
  libs.emplace_back("mpi");
#endif
#if defined(COMMKIT_BENCH_RAW_GLOO)
  libs.emplace_back("gloo");
#endif
#if defined(COMMKIT_BENCH_RAW_NCCL)
  libs.emplace_back("nccl");
#endif
  return libs;
}

void AbortMpiOnError(int code) {
#if defined(COMMKIT_BENCH_RAW_MPI)
  raw::AbortMpi(code);
#else
  (void)code;
#endif
}

Result<std::unique_ptr<RawCollective>> MakeRawCollective(std::string_view lib, const BenchOptions& options, int rank,
                                                         int nranks, std::shared_ptr<Store> store, Device* device) {
  if (device != nullptr && lib != "nccl") {
    return Status::InvalidArgument(StrCat("commkit-bench: --raw ", lib,
                                          " takes host buffers; with a device backend use --raw nccl"));
  }
  if (lib == "host") return raw::MakeHost(options, rank, nranks, std::move(store));
#if defined(COMMKIT_BENCH_RAW_MPI)
  if (lib == "mpi") return raw::MakeMpi(options, rank, nranks);
#endif
#if defined(COMMKIT_BENCH_RAW_NCCL)
  if (lib == "nccl") return raw::MakeNccl(options, rank, nranks, std::move(store), device);
#else
  (void)device;
#endif
#if defined(COMMKIT_BENCH_RAW_GLOO)
  if (lib == "gloo") return raw::MakeGloo(options, rank, nranks, std::move(store));
#endif
  const std::vector<std::string> libs = RawLibraries();
  return Status::Unavailable(StrCat("commkit-bench: --raw ", lib, ": not compiled into this build (raw baselines: ",
                                    libs.empty() ? std::string("none") : Join(libs, ", "),
                                    "); install the library's development package and reconfigure"));
}

}  // namespace commkit::bench
