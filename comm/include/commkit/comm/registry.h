// The backend registry: which backends this build has, whether each can run here and why not.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/backend_info.h"

namespace commkit {

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
