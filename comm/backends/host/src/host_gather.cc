// The host backend's all-gather(v) and gather within a host (host_engine.h): staged through the slots,
// or single-copy, where each rank reads its peers' inputs straight into its output.
//
// Staging costs every block a copy into the owner's slot and one out of it. Once a call's data leaves
// the cache that second pass goes to memory, and a direct read of the peer's buffer moves each block
// once: between processes with process_vm_readv (cross-memory attach, the kernel copies from the
// peer's pages), between threads of one process with memcpy. 2 ranks on the 2-core development
// machine, 2 MiB pages, 16-256 MiB: staged 4.1-5.2 GB/s busbw, single-copy 5.0-7.4
// (docs/host-backend.md, "Single-copy all-gather").
#include <cstring>

#include "commkit/common/strings.h"
#include "host_engine.h"

namespace commkit::comm::host {

Status HostBackend::Gather(const CollectiveArgs& a, Deadline d) {
  const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  const std::vector<std::size_t>& counts = Counts(a, a.kind == CollectiveKind::kAllgatherv);
  const std::vector<std::size_t>& off = Offsets(counts, e);
  std::vector<std::size_t>& bytes = Blocks(0);
  for (std::size_t q = 0; q < p; ++q) bytes[q] = counts[q] * e;
  const std::uint8_t* mine = send && send != recv ? send : recv + off[me()];
  const bool take = a.kind != CollectiveKind::kGather || me() == a.root;
  // One choice for every rank: the table is keyed by the whole output (the same on every rank).
  const bool single = single_copy_ && P() > 1 &&
                      table_.Select(CollectiveKind::kAllgather, MemoryKind::kHost, off[p]).algorithm ==
                          CollectiveAlgorithm::kSingleCopy;
  tune::NoteRun("host", single ? CollectiveAlgorithm::kSingleCopy : CollectiveAlgorithm::kFlat);
  if (single) return SingleCopyGather(a, d, mine, bytes, off, take);
  const bool stream = take && Streams(bytes[me()] + off[p]);
  return Exchange(a, d, mine, bytes, [&](std::size_t lo, const auto& src) {
    if (!take) return;
    for (std::size_t q = 0; q < p; ++q) {
      if (!src[q]) continue;
      // This rank's own block comes from its input (nothing to do in place), not back out of its slot.
      const std::uint8_t* from = q == static_cast<std::size_t>(me()) ? mine + lo : src[q];
      std::uint8_t* dst = recv + off[q] + lo;
      if (dst != from) Copy(stream, dst, from, std::min(S, bytes[q] - lo));
    }
  });
}

Status HostBackend::AnnounceBuffer(const CollectiveArgs& a, Deadline d, const void* buffer) {
  COMMKIT_RETURN_IF_ERROR(t_->Begin(d).status());
  const PeerBuffer own = PeerBuffer::Of(buffer);
  std::memcpy(t_->InlineData(), &own, sizeof own);
  t_->Post(a.fingerprint);
  if (Status s = t_->WaitPosted(d); !s.ok()) return RoundFailed(std::move(s));
  return Status::Ok();
}

// One round: every rank announces its block; the takers read every peer's block; the second phase
// (SignalReduced/WaitReduced) keeps every input untouched until the last reader is done with it.
Status HostBackend::SingleCopyGather(const CollectiveArgs& a, Deadline d, const std::uint8_t* mine,
                                     const std::vector<std::size_t>& bytes, const std::vector<std::size_t>& off,
                                     bool take) {
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  COMMKIT_RETURN_IF_ERROR(AnnounceBuffer(a, d, mine));
  Status read = Status::Ok();
  if (take) {
    const bool stream = Streams(bytes[me()] + off[P()]);
    for (int q = 0; q < P() && read.ok(); ++q) {
      std::uint8_t* dst = recv + off[q];
      if (q == me()) {
        if (dst != mine) Copy(stream, dst, mine, bytes[q]);
        continue;
      }
      if (bytes[q] == 0) continue;
      read = ReadPeer(Announced(q), dst, bytes[q]);
      if (!read.ok()) read = Status(read.code(), StrCat("host backend: single-copy ", ToString(a.kind), ": rank ", me(),
                                                        " reading rank ", q, "'s block: ", read.message(),
                                                        " (COMMKIT_TUNE=host.", ToString(a.kind), ":*:flat stages through shared memory)"));
    }
  }
  t_->SignalReduced();
  COMMKIT_RETURN_IF_ERROR(t_->WaitReduced(d, -1, ShmTransport::ReadTime(off[P()])));
  t_->Finish();
  return read;
}

}  // namespace commkit::comm::host
