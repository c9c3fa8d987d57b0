// A collective's meeting in the shared-memory transport (shm_transport.h), with small inputs along:
// how the mpi and gloo backends check for mismatched calls within a node, and run the collectives
// whose data fits a slot without their library. One round per collective: every rank publishes the
// call's fingerprint and its data, waits for every rank's, and computes its result from every rank's
// data in rank order, so every rank gets the same bits. Internal to commkit::comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "shm/shm_transport.h"
#include "shm/single_copy.h"

namespace commkit::comm {

class SlotMeeting {
 public:
  using Deadline = ShmTransport::Deadline;

  // `single_copy`: every rank may read every peer's memory (SingleCopyPossible, shm/single_copy.h).
  SlotMeeting(std::unique_ptr<ShmTransport> transport, bool single_copy)
      : t_(std::move(transport)), single_copy_(single_copy) {}
  // The meeting over a connected transport, after asking every rank over `exchange` (collective)
  // whether the ranks may read each other's memory. Where not, rank 0 logs why at info level, naming
  // `who` and the `library` its broadcasts beyond the slots then go through.
  static std::unique_ptr<SlotMeeting> Create(std::unique_ptr<ShmTransport> transport, const ShmExchange& exchange,
                                             std::string_view who, std::string_view library);

  // Data bytes per slot for a group of `ranks`: 64 KiB, less from about 60 ranks on, so that the
  // group's segments (two slots per rank) stay within 8 MiB of /dev/shm (a container's is often
  // 64 MiB). A call larger than a slot goes through the backend's library.
  static std::size_t SlotBytesFor(int ranks);

  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  // Whether `bytes` of one rank's data fit a slot.
  bool Fits(std::size_t bytes) const { return bytes <= t_->slot_bytes(); }
  // All-gathers and broadcasts go through the slots up to this many bytes per rank: one copy more than
  // a point-to-point message (in, then out), which costs more than the message from here on (mpi
  // backend, all-gather, 2 ranks, 64 KiB per rank: 14.4 µs against 9.0 raw; 16 KiB: 3.9 against 6.1),
  // and far less than a Gloo call (100 µs and more).
  static constexpr std::size_t kGatherMaxBytes = std::size_t{16} << 10;
  bool Gathers(std::size_t bytes) const { return bytes <= kGatherMaxBytes && Fits(bytes); }

  // Broadcasts beyond the slots' share (Gathers) are read straight from the root's buffer where the
  // ranks may read each other: one pass, against the library's message (a 512 KiB-1 MiB MPI_Bcast's
  // rendezvous and the mpi backend's wait on it cost 1.15-1.2x raw MPI_Bcast; Gloo sends it over TCP).
  bool ReadsBroadcast(std::size_t bytes) const { return single_copy_ && bytes > kGatherMaxBytes; }
  // All-gathers whose largest block is beyond the slots' share are read the same way, every rank
  // reading every peer's input into its output: one pass per block, where the library's message costs
  // a rendezvous and a wait on it besides (mpi backend, 2 ranks, Intel VM: 32 KiB per rank 7.8 us
  // against 4.5 for raw MPI_Allgather; docs/mpi-backend.md).
  bool ReadsGather(std::size_t most) const { return single_copy_ && most > kGatherMaxBytes; }

  // Publishes the call's fingerprint and `bytes` of `data` (scaled by `scale` unless it is 1:
  // PREMUL_SUM), then waits for every rank's, bounded by `deadline` and Abort(). `most`: when other
  // ranks publish more than `bytes`, the most any rank does (every rank must decide alike whether the
  // data travels in the round's header line).
  // - Ok: the round is open; Data(q) is rank q's data until Close().
  // - Mismatch (on every rank alike, the fingerprints differ): the round is over and no data moved.
  // - Anything else: the wait failed and the peers have been told (the transport withdraws the post).
  Status Meet(const CollectiveArgs& a, const void* data, std::size_t bytes, double scale, std::size_t most,
              Deadline deadline);
  // Ends the open round, if any.
  void Close() {
    if (open_) t_->Finish();
    open_ = false;
  }

  // Rank q's data in the open round. Rounds of at least ShmTransportOptions::rotate_from bytes start
  // further into the slot from round to round (ShmTransport::RotatedOffset), alike on every rank, since
  // every rank passes Meet the same larger of `bytes` and `most`: on the Intel VM a 2-32 KiB all-reduce
  // in the meeting took 0.7-0.8x the time of one that always started at the slot's first byte.
  const char* Data(int q) const {
    return reinterpret_cast<const char*>(inline_ ? t_->PeerInline(q) : t_->Peer(q) + rot_);
  }
  // Results from every rank's data in the open round, into a.recv:
  // `n` elements at byte `off` of every rank's input, reduced (AVG divided, PREMUL_SUM scaled at Meet).
  void Reduce(const CollectiveArgs& a, std::size_t off, std::size_t n) const;
  // Every rank's block; `offsets`: the blocks' byte offsets (size + 1), or empty for blocks of a.count elements.
  void Gather(const CollectiveArgs& a, std::span<const std::size_t> offsets) const;
  // The root's data (a non-root copies it; the root's buffer already holds it).
  void Broadcast(const CollectiveArgs& a) const;
  // A broadcast read straight from the root's buffer (ReadsBroadcast): Meet with Announce(a.recv) as
  // every rank's data, then this. Every non-root reads; the root returns only once every reader is
  // done with its buffer. Ends the round; a failed read fails on the rank that read.
  static PeerBuffer Announce(const void* buffer) { return PeerBuffer::Of(buffer); }
  Status ReadBroadcast(const CollectiveArgs& a, Deadline deadline);
  // An all-gather read straight from every rank's input (ReadsGather): Meet with Announce(input) as
  // every rank's data, then this. Rank q's block lands at a.recv + offsets[q] (offsets: the blocks'
  // byte offsets, size + 1); this rank's own block is copied from `input` unless it is already there.
  // `input` must not overlap any other block of the output (peers read it while this rank writes).
  // Ends the round like ReadBroadcast: every input stays untouched until its last reader is done.
  Status ReadGather(const CollectiveArgs& a, const void* input, std::span<const std::size_t> offsets,
                    Deadline deadline);
  // This rank's input to such an all-gather(v): a.send, or its block of a.recv when a.send is null
  // (in place). An input inside the output elsewhere than this rank's block (send == recv on a rank
  // other than 0: the buffer's start, as in the staged meeting) is moved to the block first.
  static const void* GatherInput(const CollectiveArgs& a, std::span<const std::size_t> offsets, int rank);
  // An all-gather(v)'s largest block in bytes (a.count's, or the largest of a.counts), which decides
  // ReadsGather alike on every rank; and its blocks' byte offsets in the output (size + 1) into `into`.
  static std::size_t LargestGatherBlock(const CollectiveArgs& a);
  static void GatherOffsets(const CollectiveArgs& a, int size, std::vector<std::size_t>& into);

  // Whether a rank that arrives first may spin (or yield) before it sleeps; see
  // ShmTransport::set_busy_wait.
  void set_busy_wait(bool busy) { t_->set_busy_wait(busy); }
  // Makes every wait of this rank return Aborted and tells the peers. Any thread.
  void Abort(std::string_view reason) { t_->Abort(reason); }

 private:
  // The second phase of a round whose data was announced and read (ReadBroadcast, ReadGather): waits
  // until every rank has read (`bytes`: the most one rank reads, which bounds the spin), then ends
  // the round. Returns `read` unless the wait failed.
  Status ReleaseAfterReads(Status read, std::size_t bytes, Deadline deadline);

  std::unique_ptr<ShmTransport> t_;
  bool single_copy_ = false;
  bool inline_ = false;  // the open round's data travels in the header line
  const void* input_ = nullptr;  // the open round's data as Meet was given it (unscaled), or null
  std::size_t rot_ = 0;  // where the open round's data starts in the slots (ShmTransport::RotatedOffset)
  bool open_ = false;
};

}  // namespace commkit::comm
