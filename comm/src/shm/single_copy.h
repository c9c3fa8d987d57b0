// Reading a peer's memory directly (cross-memory attach) between the ranks of one host: what the host
// backend's single-copy all-gather and broadcast and the mpi and gloo backends' broadcast in the
// meeting use instead of staging through the shared slots. Private to commkit::comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "commkit/common/status.h"
#include "shm/shm_transport.h"

namespace commkit::comm {

// Where a rank's buffer is: its process and the address there. Announced in a round's inline line.
struct PeerBuffer {
  std::uint64_t pid = 0;
  std::uint64_t address = 0;
  static PeerBuffer Of(const void* buffer);
};
static_assert(sizeof(PeerBuffer) <= ShmTransport::kInlineBytes);

// Reads `n` bytes at `from` into `to`: process_vm_readv from another process, memcpy within this one.
Status ReadPeer(const PeerBuffer& from, void* to, std::size_t n);

// Whether every rank of a group within one host can read every peer's memory (process_vm_readv, or
// plain reads between threads of one process): collective over `exchange`, every rank gets the same
// answer; false with the first refusal ("rank R: why") in `why_not`.
Result<bool> SingleCopyPossible(const ShmExchange& exchange, int rank, std::string* why_not);

}  // namespace commkit::comm
