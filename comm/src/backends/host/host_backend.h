// commkit's own host backend ("host"): ranks on one host exchange host buffers through shared memory
// (see host_transport.h). Built into commkit::comm on Linux; no third-party library.
#pragma once

#include <memory>

#include "commkit/comm/backend.h"

namespace commkit {

// Collective over the group. Unavailable (with the ranks' hosts) when the ranks do not share one
// host's /dev/shm, or when /dev/shm is too small (with the fix). Environment:
//   COMMKIT_HOST_SLOT_BYTES  bytes per staging slot, two per rank (default 1 MiB, 64 KiB..1 GiB)
//   COMMKIT_HOST_FLAT_BYTES  all-reduce/reduce up to this size reduce whole buffers on every rank in one
//                            round; larger ones reduce a slice per rank, then gather (default 64 KiB)
Result<std::unique_ptr<Backend>> CreateHostBackend(const BackendContext& context);

}  // namespace commkit
