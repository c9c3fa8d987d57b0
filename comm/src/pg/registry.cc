#include "commkit/comm/registry.h"

#include "commkit/common/strings.h"

namespace commkit {

void RegisterBuiltinBackends(Registry& registry);  // builtin_backends.cc

Registry& Registry::Default() {
  static Registry* registry = [] {
    auto* r = new Registry();
    RegisterBuiltinBackends(*r);
    return r;
  }();
  return *registry;
}

void Registry::Register(BackendInfo info) {
  for (auto& existing : backends_) {
    if (existing.name == info.name) {
      existing = std::move(info);
      return;
    }
  }
  backends_.push_back(std::move(info));
}

std::vector<BackendInfo> Registry::List() const { return backends_; }

Result<std::unique_ptr<Backend>> Registry::Create(const std::string& name, MemoryKind memory,
                                                  const BackendContext& context) const {
  std::vector<std::string> known;
  for (const auto& b : backends_) {
    known.push_back(StrCat(b.name, b.available ? "" : StrCat(" (unavailable: ", b.reason, ")")));
    bool match = name == "auto" ? (b.available && b.memory == memory) : b.name == name;
    if (!match) continue;
    if (!b.available) return Status::Unavailable(StrCat("backend '", name, "' is unavailable: ", b.reason));
    return b.create(context);
  }
  if (name == "auto")
    return Status::Unavailable(StrCat("no available backend for ", ToString(memory), " memory; known: ", Join(known, ", ")));
  return Status::InvalidArgument(StrCat("unknown backend '", name, "'; known: ", Join(known, ", ")));
}

}  // namespace commkit
