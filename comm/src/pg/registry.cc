#include "commkit/comm/registry.h"

#include <dlfcn.h>

#include "commkit/common/config.h"
#include "commkit/common/strings.h"

namespace commkit {

void RegisterBuiltinBackends(Registry& registry);  // builtin_backends.cc

namespace {

// Backends built as their own libraries (they link a third-party library that commkit::comm must not
// depend on) register themselves through an exported C function when the program links them:
//   extern "C" void commkit_register_nccl_backend(commkit::Registry* registry);
struct LinkedBackend {
  const char* name;
  const char* symbol;
  const char* target;
  MemoryKind memory;
};
// In registration order: "auto" takes the first available backend for the memory kind, so gloo comes
// right after the builtin host backend.
constexpr LinkedBackend kLinkedBackends[] = {
#if COMMKIT_HAVE_GLOO
    {"gloo", "commkit_register_gloo_backend", "commkit::comm_gloo", MemoryKind::kHost},
#endif
    {"mpi", "commkit_register_mpi_backend", "commkit::comm_mpi", MemoryKind::kHost},
    {"nccl", "commkit_register_nccl_backend", "commkit::comm_nccl", MemoryKind::kDevice},
};

}  // namespace

Registry& Registry::Default() {
  static Registry* registry = [] {
    auto* r = new Registry();
    RegisterBuiltinBackends(*r);
    for (const auto& linked : kLinkedBackends) {
      using RegisterFn = void (*)(Registry*);
      auto fn = reinterpret_cast<RegisterFn>(::dlsym(RTLD_DEFAULT, linked.symbol));
      if (fn != nullptr) {
        fn(r);
        continue;
      }
      BackendInfo info;
      info.name = linked.name;
      info.memory = linked.memory;
      info.reason = StrCat("not linked into this program (link ", linked.target, ")");
      r->Register(std::move(info));
    }
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
    auto backend = b.create(context);
    // "auto" moves on when a backend cannot serve this group (the host backend across hosts). Every
    // rank sees the same reason, so every rank moves on to the same next backend.
    if (name == "auto" && !backend.ok() && backend.status().code() == StatusCode::kUnavailable) {
      known.back() = StrCat(b.name, " (", backend.status().message(), ")");
      continue;
    }
    return backend;
  }
  if (name == "auto")
    return Status::Unavailable(StrCat("no available backend for ", ToString(memory), " memory; known: ", Join(known, ", ")));
  return Status::InvalidArgument(StrCat("unknown backend '", name, "'; known: ", Join(known, ", ")));
}

}  // namespace commkit
