// What a backend tells the registry about itself: its name, the memory it works on, whether it can
// run in this process (and why not) and how to create it. Backends include this header, not the
// registry's.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "commkit/comm/backend.h"

namespace commkit {

struct BackendInfo {
  std::string name;            // "gloo", "mpi", "nccl", "host"
  bool available = false;      // usable in this process now
  std::string reason;          // why not ("not built: COMMKIT_WITH_MPI=OFF", "no CUDA device", ...)
  MemoryKind memory = MemoryKind::kHost;
  std::function<Result<std::unique_ptr<Backend>>(const BackendContext&)> create;
};

}  // namespace commkit
