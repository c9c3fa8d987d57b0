// The Gloo backend ("gloo": host buffers over TCP). Built into commkit::comm when the build found
// Gloo; no Gloo header is included here.
#pragma once

#include <memory>

#include "commkit/comm/backend.h"
#include "commkit/comm/backend_info.h"

namespace commkit::comm::gloo {

// Connects a full mesh of TCP pairs through the group's store. The interface comes from
// COMMKIT_SOCKET_IFNAME or GLOO_SOCKET_IFNAME, else the local address that routes to MASTER_ADDR
// (127.0.0.1 for single-host jobs).
Result<std::unique_ptr<Backend>> CreateGlooBackend(const BackendContext& context);

// The registry entry for "gloo".
BackendInfo GlooBackendInfo();

}  // namespace commkit::comm::gloo
