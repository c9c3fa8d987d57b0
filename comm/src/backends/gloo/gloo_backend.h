// The Gloo backend (host buffers over TCP), built when COMMKIT_HAVE_GLOO. Private to commkit::comm.
#pragma once

#include <memory>

#include "commkit/comm/backend.h"

namespace commkit {

// Connects a full mesh of TCP pairs through the group's store. The interface comes from
// COMMKIT_SOCKET_IFNAME or GLOO_SOCKET_IFNAME, else the local address that routes to MASTER_ADDR
// (127.0.0.1 for single-host jobs).
Result<std::unique_ptr<Backend>> CreateGlooBackend(const BackendContext& context);

}  // namespace commkit
