// The backend registry: which backends this build has, whether each can run here and why not.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/backend.h"

namespace commkit {

struct BackendInfo {
  std::string name;            // "gloo", "mpi", "nccl", "host"
  bool available = false;      // usable in this process now
  std::string reason;          // why not ("not built: COMMKIT_WITH_MPI=OFF", "no CUDA device", ...)
  MemoryKind memory = MemoryKind::kHost;
  std::function<Result<std::unique_ptr<Backend>>(const BackendContext&)> create;
};

class Registry {
 public:
  // The process-wide registry with every backend this build knows (registered explicitly, once).
  static Registry& Default();

  void Register(BackendInfo info);
  std::vector<BackendInfo> List() const;
  // The backend named `name`, or for "auto" the first available one for `memory`.
  Result<std::unique_ptr<Backend>> Create(const std::string& name, MemoryKind memory, const BackendContext& context) const;

 private:
  std::vector<BackendInfo> backends_;
};

}  // namespace commkit
