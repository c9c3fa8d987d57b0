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

#include <algorithm>
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
  // How long a wait spins before it sleeps, when every rank has a core (otherwise it yields for up
  // to 1 ms, then sleeps: a spinning rank would keep the awaited one off the core).
  std::chrono::microseconds spin{40};
  // false: a rank that arrives first sleeps on the futex at once, without spinning or yielding (the
  // gloo backend: a rank's own library thread may need the core it would spin on); set_busy_wait.
  bool busy_wait = true;
  // Rounds that move at least this many bytes rotate where they start in the slot (RotatedOffset).
  // On the AMD development VM small rounds were 15-30% slower rotated (4 KiB: their lines stay in the
  // writer's L1/L2 between calls); on an Intel Xeon VM rotating from 2 KiB made 4-32 KiB rounds
  // 10-30% faster, since there a store into a line the peer core still holds waits for its
  // invalidation (docs/host-backend.md, "Where a round starts in the slot"). Every backend starts
  // from RotateFromFor(its CPU's vendor); the host backend's COMMKIT_HOST_ROTATE_BYTES overrides it.
  std::size_t rotate_from = std::size_t{32} << 10;
  std::vector<int> names;              // the rank each local rank is called in messages (empty: the same)
  std::string label = "host backend";  // starts every message ("mpi backend")
  std::string size_setting;            // the setting that decides slot_bytes, named in size errors (may be empty)
};

// ShmTransportOptions::rotate_from for a CPU of this vendor ("GenuineIntel", as /proc/cpuinfo's vendor_id
// says; CpuVendor in common/cpu_cache.h): 2 KiB on Intel, 32 KiB elsewhere, one VM of each measured.
std::size_t RotateFromFor(std::string_view cpu_vendor);

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
  // The rounds' common path is inline (below): a small collective is a few hundred nanoseconds, and
  // the waits, failures and sleeps stay out of line.
  Result<std::uint8_t*> Begin(Deadline deadline);
  void Post(std::uint64_t fingerprint);
  Status WaitPosted(Deadline deadline);  // Mismatch when the fingerprints of this round differ
  const std::uint8_t* Peer(int q) const { return SlotData(q, step_ + 1); }  // q's slot (q == rank(): this rank's)
  // Where in the slot this round's data starts, for a round that puts at most `used` bytes into each
  // of the slot's parts of `region` bytes (the whole slot, or a reduce-scatter's sub-block per rank)
  // and `moved` bytes in all. A slot line a peer read in an earlier call is still in that peer's
  // cache, and a store into it must first invalidate that copy: that alone held the copy into the slot
  // of a 64 KiB all-reduce to ~7 GB/s (docs/host-backend.md). Rounds that move at least
  // ShmTransportOptions::rotate_from bytes therefore start further into the slot from one round to the next, so a line
  // is written again only after both slots (2 MiB by default, twice a core's L2 on the development machine) have passed
  // through the peers' caches. Smaller rounds start at 0. Every rank gets the same offset from the same arguments: it
  // depends only on them, on the round number, which all ranks share, and on the options, which the backend sets alike.
  std::size_t RotatedOffset(std::size_t used, std::size_t region, std::size_t moved) const {
    if (moved < options_.rotate_from || used == 0) return 0;
    const std::size_t span = (used + 4095) / 4096 * 4096;
    const std::size_t places = region / span;
    return places > 1 ? static_cast<std::size_t>((step_ + 1) / 2 % places) * span : 0;
  }
  // A round whose `used` bytes fill one part: the whole slot.
  std::size_t RotatedOffset(std::size_t used) const { return RotatedOffset(used, options_.slot_bytes, used); }
  // Payloads of at most kInlineBytes can travel in the line that announces the round (one cache-line
  // transfer per peer instead of two): write InlineData() instead of Begin()'s slot, read PeerInline(q).
  static constexpr std::size_t kInlineBytes = 48;
  std::uint8_t* InlineData() { return Header(rank_, step_ + 1).inline_data; }
  const std::uint8_t* PeerInline(int q) const { return Header(q, step_ + 1).inline_data; }
  // Changes ShmTransportOptions::busy_wait for the rounds that follow (the thread running rounds).
  void set_busy_wait(bool busy) { options_.busy_wait = busy; }
  void SignalReduced();
  // Every peer, or only rank `only`. `spin`: how long the second phase is expected to take when that
  // is known (a single-copy read of a given size); the wait polls at least that long before it sleeps,
  // also where busy_wait is off, since every peer is past this round's meeting and no library message
  // of an earlier call needs this core. A sleeping waiter's wake-up cost as much as a 1 MiB read on the
  // development VM (docs/host-backend.md, "Waiting").
  Status WaitReduced(Deadline deadline, int only = -1, std::chrono::microseconds spin = {});
  // The spin for a second phase in which the slowest peer reads `bytes` from another core.
  static std::chrono::microseconds ReadTime(std::size_t bytes) {
    return std::chrono::microseconds(std::min<std::size_t>(bytes / 4096, 5000));  // 4 GB/s, at most 5 ms
  }
  void Finish();

  // --- point-to-point (thread-safe per peer and direction; needs ring_bytes > 0) ---
  Status Send(int peer, int tag, const void* data, std::size_t bytes, Deadline deadline);
  Status Recv(int peer, int tag, void* data, std::size_t bytes, Deadline deadline);

  // Makes every wait of this rank return Aborted and tells the peers. Any thread.
  void Abort(std::string_view reason);

 private:
  struct alignas(64) PaddedCounter {
    std::atomic<std::uint64_t> value{0};
  };
  // The first page of every rank's segment. `gave_up` and `reason` say that this rank stopped
  // waiting in a round (kGaveUpRound: a round wait failed) or for good (kGaveUpAborted: Abort()).
  struct Control {
    PaddedCounter reduced, done;
    alignas(64) std::atomic<std::uint32_t> futex{0};
    std::atomic<std::uint32_t> waiters{0};
    std::atomic<std::uint32_t> gave_up{0};  // written last (release), after `reason`
    std::uint32_t magic = 0;
    std::int32_t pid = 0;
    char reason[256] = {};
  };
  // A round's arrival and its fingerprint share one cache line, the one a peer polls: an arriving
  // rank costs its peers one cache-line transfer, not one for a counter and one for the fingerprint.
  struct SlotHeader {
    std::atomic<std::uint64_t> step;  // written last (release): the round this slot now holds
    std::uint64_t fingerprint;
    alignas(16) std::uint8_t inline_data[kInlineBytes];  // a payload this small travels here
  };
  static_assert(sizeof(SlotHeader) == 64);

  ShmTransport() = default;
  Control& Ctl(int q) const { return *reinterpret_cast<Control*>(segments_[q].data()); }
  std::uint8_t* SlotData(int q, std::uint64_t step) const {
    return segments_[q].data() + slot_offset_ + slot_stride_ * (step % 2) + sizeof(SlotHeader);
  }
  SlotHeader& Header(int q, std::uint64_t step) const {
    return *reinterpret_cast<SlotHeader*>(segments_[q].data() + slot_offset_ + slot_stride_ * (step % 2));
  }
  std::atomic<std::uint64_t>& Written(int sender, int receiver) const;   // in the sender's segment
  std::atomic<std::uint64_t>& Consumed(int receiver, int sender) const;  // in the receiver's segment
  std::uint8_t* Ring(int sender, int receiver) const;
  // Tells this rank's waiters that it made progress; the system call only when one sleeps.
  void Wake() {
    Control& c = Ctl(rank_);
    c.futex.fetch_add(1);
    if (c.waiters.load() > 0) WakeSleepers();
  }
  void WakeSleepers();
  // Begin() when the previous round failed: waits until every peer finished reading this slot.
  Result<std::uint8_t*> WaitForSlot(Deadline deadline);
  // WaitPosted() when a peer has not posted yet.
  Status WaitForPosts(Deadline deadline);
  // Every peer posted this round: compares the fingerprints.
  Status ComparePosts();
  Status Mismatched(int q) const;
  // Waits until ready() is true; `q` is the peer whose progress (and futex) it depends on. `round`:
  // a collective's wait (any peer giving up ends it), not a send's or receive's.
  template <typename Ready>
  Status WaitOn(int q, Ready ready, Deadline deadline, const char* what, bool round = false,
                std::chrono::microseconds spin = {});
  Status PeerGone(int q, const char* what);
  Status PeerGaveUp(int waited_for, const char* what, bool round);
  // A round wait failed: tell the peers (GiveUp) and return `s`.
  Status RoundFailed(Status s);
  // Marks this rank's segment "gave up" with `reason` and wakes its waiters.
  void GiveUp(std::string_view reason);
  std::string AbortReason();
  int Name(int q) const { return options_.names.empty() ? q : options_.names[q]; }

  int rank_ = 0, size_ = 1;
  ShmTransportOptions options_;
  std::size_t ctrl_bytes_ = 0, ring_offset_ = 0, slot_offset_ = 0, slot_stride_ = 0, segment_bytes_ = 0;
  std::vector<shm::ShmSegment> segments_;  // segments_[q]: rank q's
  std::vector<int> pids_;                  // 0 when liveness cannot be checked (other pid namespace)
  std::uint64_t step_ = 0;                 // rounds finished
  std::uint64_t all_posted_ = 0;           // the last round whose posts this rank saw from every peer
  bool spin_ = true;                       // false when ranks outnumber cores: yield, then sleep
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;  // abort_reason_, written by Abort() on any thread
  std::string abort_reason_;
  std::unique_ptr<std::mutex[]> send_mu_, recv_mu_;
};

inline Result<std::uint8_t*> ShmTransport::Begin(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  // This slot was last read in round s-2. A peer that posted round s-1 had finished round s-2 (a rank
  // runs its rounds in order), so when the last WaitPosted saw every peer there, nothing to wait for.
  if (s > 2 && all_posted_ < s - 1) return WaitForSlot(deadline);
  return SlotData(rank_, s);
}

inline void ShmTransport::Post(std::uint64_t fingerprint) {
  const std::uint64_t s = step_ + 1;
  SlotHeader& h = Header(rank_, s);
  h.fingerprint = fingerprint;
  h.step.store(s, std::memory_order_release);
  Wake();
}

inline Status ShmTransport::WaitPosted(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q)
    if (Header(q, s).step.load(std::memory_order_acquire) < s) return WaitForPosts(deadline);
  return ComparePosts();
}

inline Status ShmTransport::ComparePosts() {
  const std::uint64_t s = step_ + 1;
  all_posted_ = s;
  // When the fingerprints are not all equal, every rank differs from at least one other: all ranks
  // report the mismatch in the same round, and finish it, so the round counters stay aligned.
  const std::uint64_t mine = Header(rank_, s).fingerprint;
  for (int q = 0; q < size_; ++q)
    if (Header(q, s).fingerprint != mine) return Mismatched(q);
  return Status::Ok();
}

inline void ShmTransport::SignalReduced() {
  Ctl(rank_).reduced.value.store(step_ + 1, std::memory_order_release);
  Wake();
}

// No wake-up: a peer waits for `done` only in a Begin() whose previous round failed (see Begin), and
// its sleep is bounded by the futex timeout; every round's success path skips the atomic increment.
inline void ShmTransport::Finish() {
  ++step_;
  Ctl(rank_).done.value.store(step_, std::memory_order_release);
}

}  // namespace commkit::comm
