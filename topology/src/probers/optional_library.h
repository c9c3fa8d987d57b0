// The optional libraries the probers call (libibverbs, libfabric, libhwloc) are loaded at run time
// (commkit/common/dynamic_library.h), as NVML and libcuda are: a commkit built with them still starts
// on a node without them, and the prober reports "<soname> not available: <why>; <what to install>"
// while every other prober runs. Their headers are still used at build time, each by the one prober
// that calls the library.
#pragma once

#include "commkit/common/dynamic_library.h"

namespace commkit::topology {

inline constexpr OptionalLibrary kLibibverbs{"libibverbs.so.1", "COMMKIT_LIBIBVERBS",
                                             "install rdma-core / ibverbs-providers to probe RDMA devices"};
inline constexpr OptionalLibrary kLibfabric{"libfabric.so.1", "COMMKIT_LIBFABRIC",
                                            "install libfabric (libfabric1, or the EFA installer on AWS) to probe EFA devices"};
// hwloc 2.x (the API the prober is built against; the prober checks the run-time API too).
inline constexpr OptionalLibrary kLibhwloc{"libhwloc.so.15", "COMMKIT_LIBHWLOC",
                                           "install hwloc 2.x (libhwloc15) to probe NUMA nodes and device locality"};

}  // namespace commkit::topology
