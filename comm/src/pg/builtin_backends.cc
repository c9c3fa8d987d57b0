// The backends this build has, registered explicitly (no static-initializer self-registration).
#include "commkit/comm/registry.h"
#include "commkit/common/config.h"

#include "backends/host/host_backend.h"
#if COMMKIT_HAVE_GLOO
#include "backends/gloo/gloo_backend.h"
#endif

namespace commkit {

void RegisterBuiltinBackends(Registry& registry) {
  // First, so "auto" picks it for host buffers when the ranks share a host (it falls through to the
  // next backend when they do not).
  BackendInfo host;
  host.name = "host";
  host.memory = MemoryKind::kHost;
  host.available = true;
  host.create = &CreateHostBackend;
  registry.Register(std::move(host));

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
