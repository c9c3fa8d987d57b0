// The host backend's transport: one shared-memory segment per rank, mapped by every rank of the group,
// with lock-free round counters for collectives and one single-producer ring per ordered pair for
// send/recv. Private to commkit::comm.
//
// Collectives run as "rounds" that every rank enters in the same order. In round s a rank
//   Begin()        makes sure every peer has finished round s-2 (the last user of this slot),
//   writes its contribution into its own slot, Post()s it (with the call's fingerprint),
//   WaitPosted()   waits for every peer's post and compares fingerprints (Mismatch when they differ),
//   reads what it needs from Peer(q) (optionally SignalReduced()/WaitReduced() for a second phase),
//   Finish()es the round.
// Two slots per rank let a rank fill round s+1 while slow peers still read round s.
//
// Waiting spins briefly, then sleeps on a futex in the peer's segment; every wait is bounded by the
// caller's deadline, notices a peer that exited (kill(pid, 0), same pid namespace) or aborted, and an
// Abort() from another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/common/shm_segment.h"

namespace commkit::comm::host {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

struct TransportOptions {
  std::size_t slot_bytes = 1 << 20;  // per slot; two slots per rank (COMMKIT_HOST_SLOT_BYTES)
  std::size_t ring_bytes = 64 << 10;  // per ordered pair, for send/recv
  std::vector<int> names;  // the rank each local rank is called in messages (empty: the same)
};

struct Control;
struct SlotHeader;

class Transport {
 public:
  // Collective over the group's ranks (all on one host): creates this rank's segment, maps every
  // peer's and removes the names. Unavailable when the ranks do not share /dev/shm, with the layout.
  static Result<std::unique_ptr<Transport>> Connect(const BackendContext& context, const TransportOptions& options);
  ~Transport();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t slot_bytes() const { return options_.slot_bytes; }

  // --- rounds (one thread at a time) ---
  Result<std::uint8_t*> Begin(Deadline deadline);
  void Post(std::uint64_t fingerprint);
  Status WaitPosted(Deadline deadline);  // Mismatch when the fingerprints of this round differ
  const std::uint8_t* Peer(int q) const;  // q's slot in the current round (q == rank(): this rank's)
  // Payloads of at most kInlineBytes can travel in the line that announces the round (one cache-line
  // transfer per peer instead of two): write InlineData() instead of Begin()'s slot, read PeerInline(q).
  static constexpr std::size_t kInlineBytes = 48;
  std::uint8_t* InlineData();
  const std::uint8_t* PeerInline(int q) const;
  void SignalReduced();
  Status WaitReduced(Deadline deadline, int only = -1);  // every peer, or only rank `only`
  void Finish();

  // --- point-to-point (thread-safe per peer and direction) ---
  Status Send(int peer, int tag, const void* data, std::size_t bytes, Deadline deadline);
  Status Recv(int peer, int tag, void* data, std::size_t bytes, Deadline deadline);

  // Makes every wait of this rank return Aborted and tells the peers. Any thread.
  void Abort(std::string_view reason);

 private:
  Transport() = default;
  Control& Ctl(int q) const;
  std::uint8_t* SlotData(int q, std::uint64_t step) const;
  SlotHeader& Header(int q, std::uint64_t step) const;
  std::atomic<std::uint64_t>& Written(int sender, int receiver) const;   // in the sender's segment
  std::atomic<std::uint64_t>& Consumed(int receiver, int sender) const;  // in the receiver's segment
  std::uint8_t* Ring(int sender, int receiver) const;
  void Wake();
  // Waits until ready() is true; `q` is the peer whose progress (and futex) it depends on.
  template <typename Ready>
  Status WaitOn(int q, Ready ready, Deadline deadline, const char* what);
  Status PeerGone(int q, const char* what);
  int Name(int q) const { return options_.names.empty() ? q : options_.names[q]; }

  int rank_ = 0, size_ = 1;
  TransportOptions options_;
  std::size_t ctrl_bytes_ = 0, ring_offset_ = 0, slot_offset_ = 0, slot_stride_ = 0, segment_bytes_ = 0;
  std::vector<shm::ShmSegment> segments_;  // segments_[q]: rank q's
  std::vector<int> pids_;             // 0 when liveness cannot be checked (other pid namespace)
  std::uint64_t step_ = 0;            // rounds finished
  std::uint64_t all_posted_ = 0;      // the last round whose posts this rank saw from every peer
  bool spin_ = true;                  // false when ranks outnumber cores: sleep sooner
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  std::unique_ptr<std::mutex[]> send_mu_, recv_mu_;
};

}  // namespace commkit::comm::host
