// Whether the host backend's ranks within one host may read each other's memory, which its
// single-copy all-gather needs (host_gather.cc). Private to commkit::comm.
#pragma once

#include <string>

#include "commkit/common/status.h"
#include "shm/shm_transport.h"

namespace commkit::comm::host {

// Whether every rank of a group within one host can read every peer's memory (process_vm_readv, or
// plain reads between threads of one process): collective over `exchange`, every rank gets the same
// answer; false with the first refusal ("rank R: why") in `why_not`.
Result<bool> SingleCopyPossible(const ShmExchange& exchange, int rank, std::string* why_not);

}  // namespace commkit::comm::host
