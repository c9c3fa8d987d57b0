// commkit's own host backend ("host"): ranks on one host exchange host buffers through shared memory;
// ranks on several hosts add UCX between them (when built with it). Built into commkit::comm on
// Linux and listed by Registry::Default() first, so "auto" picks it for host buffers when it can run.
#pragma once

#include <memory>

#include "commkit/comm/backend.h"
#include "commkit/comm/backend_info.h"

namespace commkit::comm::host {

// Collective over the group. Unavailable (with the ranks' hosts) when the ranks do not share one
// host's /dev/shm and there is no UCX, or when /dev/shm is too small (with the fix). Environment:
//   COMMKIT_HOST_SLOT_BYTES  bytes per staging slot, two per rank (default 1 MiB, 64 KiB..1 GiB)
//   COMMKIT_HOST_FLAT_BYTES  all-reduce/reduce up to this size reduce whole buffers on every rank in one
//                            round; larger ones reduce a slice per rank, then gather (default 64 KiB)
Result<std::unique_ptr<Backend>> CreateHostBackend(const BackendContext& context);

// The registry entry for "host" (always available; creation says why a group cannot use it).
BackendInfo HostBackendInfo();

}  // namespace commkit::comm::host
