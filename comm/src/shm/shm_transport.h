// The shared-memory transport of the ranks of one host, used by the host backend (its engine within a
// host) and the mpi backend (its meeting before every collective): one segment per rank, mapped by
// every rank of the group, with lock-free round counters for collectives and, optionally, one
// single-producer ring per ordered pair for send/recv. Internal to commkit::comm (comm_mpi includes
// this header privately; it is not installed).
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
// caller's deadline, notices a peer that exited (kill(pid, 0), same pid namespace), an Abort() from
// another thread, and a peer that gave up: a rank whose round wait fails (timeout, abort) withdraws
// its post and says so in its segment, so ranks still waiting fail at once and a late rank fails
// instead of completing a round the others abandoned.
//
// Connect() needs one exchange of strings among the ranks at creation (ShmExchange): the host backend
// passes one over the group's Store, the mpi backend one over MPI collectives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/common/shm_segment.h"

namespace commkit::comm {

struct ShmTransportOptions {
  std::size_t slot_bytes = 1 << 20;   // per slot; two slots per rank
  std::size_t ring_bytes = 64 << 10;  // per ordered pair, for send/recv (0: no send/recv)
  // How long a wait spins before it sleeps, when every rank has a core (otherwise it yields a few
  // times, then sleeps: a spinning rank would keep the awaited one off the core).
  std::chrono::microseconds spin{40};
  std::vector<int> names;  // the rank each local rank is called in messages (empty: the same)
  std::string label = "host backend";  // starts every message ("mpi backend")
  std::string size_setting;  // the setting that decides slot_bytes, named in size errors (may be empty)
};

// Every rank passes its string and gets every rank's, in rank order; collective and blocking
// (bounded by the group's timeout where the medium allows). `step` names the exchange ("id",
// "ready", "mapped"), for a medium that keys it.
using ShmExchange = std::function<Result<std::vector<std::string>>(std::string_view step, const std::string& mine)>;

// The exchange over a group's Store: keys "<prefix><step>/<rank>", each read waits up to ctx.timeout.
ShmExchange StoreExchange(const BackendContext& ctx, std::string prefix);

class ShmTransport {
 public:
  using Clock = std::chrono::steady_clock;
  using Deadline = Clock::time_point;

  // Collective over the group's `size` ranks (all on one host): creates this rank's segment, maps
  // every peer's and removes the names. Unavailable when the ranks do not share /dev/shm or a rank
  // could not create or map its memory; every rank returns the same answer (each step's outcome is
  // exchanged before anyone acts on it).
  static Result<std::unique_ptr<ShmTransport>> Connect(int rank, int size, const std::string& group,
                                                       const ShmExchange& exchange, const ShmTransportOptions& options);
  // The largest slot (a multiple of 64 bytes, 0 when none fits) whose segment, without send/recv
  // rings, stays within `segment_bytes`.
  static std::size_t SlotBytesWithin(std::size_t segment_bytes);
  ~ShmTransport();

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

  // --- point-to-point (thread-safe per peer and direction; needs ring_bytes > 0) ---
  Status Send(int peer, int tag, const void* data, std::size_t bytes, Deadline deadline);
  Status Recv(int peer, int tag, void* data, std::size_t bytes, Deadline deadline);

  // Makes every wait of this rank return Aborted and tells the peers. Any thread.
  void Abort(std::string_view reason);

 private:
  struct Control;
  struct SlotHeader;

  ShmTransport() = default;
  Control& Ctl(int q) const;
  std::uint8_t* SlotData(int q, std::uint64_t step) const;
  SlotHeader& Header(int q, std::uint64_t step) const;
  std::atomic<std::uint64_t>& Written(int sender, int receiver) const;   // in the sender's segment
  std::atomic<std::uint64_t>& Consumed(int receiver, int sender) const;  // in the receiver's segment
  std::uint8_t* Ring(int sender, int receiver) const;
  void Wake();
  // Waits until ready() is true; `q` is the peer whose progress (and futex) it depends on.
  template <typename Ready>
  // `round`: a collective's wait (any peer giving up ends it), not a send's or receive's.
  Status WaitOn(int q, Ready ready, Deadline deadline, const char* what, bool round = false);
  Status PeerGone(int q, const char* what);
  Status PeerGaveUp(int waited_for, const char* what, bool round);
  // A round wait failed: tell the peers (GiveUp) and return `s`.
  Status RoundFailed(Status s);
  // Marks this rank's segment "stopped" with `reason` (first call wins) and wakes its waiters.
  void GiveUp(std::string_view reason);
  std::string AbortReason();
  int Name(int q) const { return options_.names.empty() ? q : options_.names[q]; }

  int rank_ = 0, size_ = 1;
  ShmTransportOptions options_;
  std::size_t ctrl_bytes_ = 0, ring_offset_ = 0, slot_offset_ = 0, slot_stride_ = 0, segment_bytes_ = 0;
  std::vector<shm::ShmSegment> segments_;  // segments_[q]: rank q's
  std::vector<int> pids_;             // 0 when liveness cannot be checked (other pid namespace)
  std::uint64_t step_ = 0;            // rounds finished
  std::uint64_t all_posted_ = 0;      // the last round whose posts this rank saw from every peer
  bool spin_ = true;                  // false when ranks outnumber cores: sleep sooner
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;  // abort_reason_, written by Abort() on any thread
  std::string abort_reason_;
  std::unique_ptr<std::mutex[]> send_mu_, recv_mu_;
};

}  // namespace commkit::comm
