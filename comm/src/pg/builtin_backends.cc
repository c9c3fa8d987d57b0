// The backends this build has, registered explicitly (no static-initializer self-registration).
#include "commkit/comm/registry.h"
#include "commkit/common/config.h"

#if COMMKIT_HAVE_GLOO
#include "backends/gloo/gloo_backend.h"
#endif

namespace commkit {

void RegisterBuiltinBackends(Registry& registry) {
  BackendInfo gloo;
  gloo.name = "gloo";
  gloo.memory = MemoryKind::kHost;
#if COMMKIT_HAVE_GLOO
  gloo.available = true;
  gloo.create = &CreateGlooBackend;
#else
  gloo.reason = "not built: Gloo was not found or COMMKIT_WITH_GLOO=OFF (apt install libgloo-dev)";
#endif
  registry.Register(std::move(gloo));
}

}  // namespace commkit
