// The backends this build has, registered explicitly (no static-initializer self-registration).
#include "commkit/comm/registry.h"
#include "commkit/common/config.h"

#include "commkit/comm/host/host_backend.h"

namespace commkit {

void RegisterBuiltinBackends(Registry& registry) {
  // First, so "auto" picks it for host buffers when the ranks share a host (it falls through to the
  // next backend when they do not).
  registry.Register(comm::host::HostBackendInfo());
  // gloo is its own library (commkit::comm_gloo, registered by registry.cc when linked); a build
  // without Gloo lists it here with the fix.
#if !COMMKIT_HAVE_GLOO
  BackendInfo gloo;
  gloo.name = "gloo";
  gloo.memory = MemoryKind::kHost;
  gloo.reason = "not built: Gloo was not found or COMMKIT_WITH_GLOO=OFF (apt install libgloo-dev)";
  registry.Register(std::move(gloo));
#endif
}

}  // namespace commkit
