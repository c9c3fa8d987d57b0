// The optional libraries the probers call (libibverbs, libfabric, libhwloc) are loaded at run time,
// as NVML and libcuda are: a commkit built with them still starts on a node without them, and the
// prober reports "<soname> not available: <why>; <what to install>" while every other prober runs.
// Their headers are still used at build time, each by the one prober that calls the library.
#pragma once

#include <string_view>

#include "commkit/common/dynamic_library.h"
#include "commkit/common/status.h"

namespace commkit::topology {

struct OptionalLibrary {
  std::string_view soname;        // "libibverbs.so.1"
  std::string_view override_env;  // "COMMKIT_LIBIBVERBS": a file or name to load instead
  std::string_view remedy;        // "install rdma-core / ibverbs-providers to probe RDMA devices"
};

inline constexpr OptionalLibrary kLibibverbs{"libibverbs.so.1", "COMMKIT_LIBIBVERBS",
                                             "install rdma-core / ibverbs-providers to probe RDMA devices"};
inline constexpr OptionalLibrary kLibfabric{"libfabric.so.1", "COMMKIT_LIBFABRIC",
                                            "install libfabric (libfabric1, or the EFA installer on AWS) to probe EFA devices"};
// hwloc 2.x (the API the prober is built against; the prober checks the run-time API too).
inline constexpr OptionalLibrary kLibhwloc{"libhwloc.so.15", "COMMKIT_LIBHWLOC",
                                           "install hwloc 2.x (libhwloc15) to probe NUMA nodes and device locality"};

// Loads `lib` (or what its override variable names). Unavailable:
// "libibverbs.so.1 not available: <dlerror>; install rdma-core / ibverbs-providers to probe ...".
// Callers bind their symbols, then Leak() the handle: providers and plugins the library loads keep
// pointers into it, so it stays mapped for the life of the process.
Result<DynamicLibrary> OpenOptionalLibrary(const OptionalLibrary& lib);

// The error for a library that loads but lacks a symbol the prober calls (too old a version):
// "libibverbs.so.1 (/usr/lib/...) lacks _ibv_query_gid_ex: ...; <remedy>".
Status MissingSymbol(const OptionalLibrary& lib, const Status& lookup);

// Whether a prober's error text is one of the two above for `lib` (the library is absent or too
// old): the prober is then skipped, like a build without the library, not failed.
bool IsLibraryUnavailable(const OptionalLibrary& lib, std::string_view error);

}  // namespace commkit::topology
