#include "shm/shm_transport.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <thread>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm {

namespace {

constexpr std::uint32_t kMagic = 0x43484b53;  // "SKHC"
constexpr std::uint32_t kFrameMagic = 0x50325046;
constexpr std::size_t kPage = 4096;
// How long a wait yields before it sleeps when ranks outnumber cores.
constexpr std::chrono::microseconds kYieldFor{1000};
// Control::gave_up: this rank's round wait failed (timeout), or it was aborted.
constexpr std::uint32_t kGaveUpRound = 1;
constexpr std::uint32_t kGaveUpAborted = 2;

std::size_t AlignUp(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

long Futex(std::atomic<std::uint32_t>* addr, int op, std::uint32_t val, const timespec* ts) {
  // Shared (not FUTEX_PRIVATE) futexes: the word lives in a MAP_SHARED segment other processes map.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// A frame header in a send/recv ring.
struct Frame {
  std::uint32_t magic;
  std::int32_t tag;
  std::uint64_t bytes;
};
static_assert(sizeof(Frame) == 16);

}  // namespace

ShmTransport::~ShmTransport() = default;

std::atomic<std::uint64_t>& ShmTransport::Written(int sender, int receiver) const {
  return reinterpret_cast<PaddedCounter*>(segments_[sender].data() + kPage)[receiver].value;
}
std::atomic<std::uint64_t>& ShmTransport::Consumed(int receiver, int sender) const {
  return reinterpret_cast<PaddedCounter*>(segments_[receiver].data() + kPage + 64 * size_)[sender].value;
}
std::uint8_t* ShmTransport::Ring(int sender, int receiver) const {
  return segments_[sender].data() + ring_offset_ + options_.ring_bytes * receiver;
}
void ShmTransport::WakeSleepers() { Futex(&Ctl(rank_).futex, FUTEX_WAKE, INT_MAX, nullptr); }

std::string ShmTransport::AbortReason() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return abort_reason_;
}

void ShmTransport::GiveUp(std::string_view reason) {
  Control& c = Ctl(rank_);
  {
    std::lock_guard<std::mutex> lock(abort_mu_);  // Abort() may run on another thread
    // The first reason stays (peers may be reading it); an Abort() after a failed round still raises
    // the mark, which also ends the peers' sends and receives to this rank.
    const std::uint32_t now = c.gave_up.load(std::memory_order_relaxed);
    const std::uint32_t mark = aborted_.load() ? kGaveUpAborted : kGaveUpRound;
    if (now >= mark) return;
    if (now == 0) {
      std::size_t n = std::min(reason.size(), sizeof(c.reason) - 1);
      std::memcpy(c.reason, reason.data(), n);
      c.reason[n] = '\0';
    }
    c.gave_up.store(mark, std::memory_order_release);
  }
  Wake();
}

Status ShmTransport::RoundFailed(Status s) {
  GiveUp(s.message());
  return s;
}

Status ShmTransport::PeerGone(int q, const char* what) {
  int pid = pids_[q];
  if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
    return Status::RemoteError(StrCat(options_.label, ": rank ", Name(q), " (pid ", pid, ") exited while rank ",
                                      Name(rank_), " waited for it to ", what));
  return Status::Ok();
}

// Any peer, not only the one waited for (which may be the one that never comes). A send or receive
// fails only when its own peer aborted: a peer's failed collective does not end its point-to-point.
Status ShmTransport::PeerGaveUp(int waited_for, const char* what, bool round) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || (!round && q != waited_for)) continue;
    Control& c = Ctl(q);
    const std::uint32_t g = c.gave_up.load(std::memory_order_acquire);
    if (g == 0 || (!round && g != kGaveUpAborted)) continue;
    const std::string reason(c.reason, strnlen(c.reason, sizeof(c.reason)));
    if (!round)
      return Status::Aborted(StrCat(options_.label, ": rank ", Name(q), " aborted (", reason, ") while rank ",
                                    Name(rank_), " waited for it to ", what));
    return Status::Timeout(StrCat(options_.label, ": rank ", Name(q), " gave up on this collective (", reason,
                                  ") while rank ", Name(rank_), " waited for rank ", Name(waited_for), " to ", what));
  }
  return Status::Ok();
}

template <typename Ready>
Status ShmTransport::WaitOn(int q, Ready ready, Deadline deadline, const char* what, bool round,
                            std::chrono::microseconds spin) {
  if (ready()) return Status::Ok();
  if (!options_.busy_wait && spin.count() == 0) {
    // Straight to the futex below.
  } else if (spin_) {
    // Ranks have a core each: a peer that is a few microseconds behind is cheaper to spin for. The
    // first polls read no clock (a read costs 30-80 ns here, a visible part of a small collective).
    for (int i = 0; i < 64; ++i) {
      CpuRelax();
      if (ready()) return Status::Ok();
    }
    auto until = Clock::now() + std::max(spin, options_.busy_wait ? options_.spin : std::chrono::microseconds{});
    do {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return Status::Ok();
        CpuRelax();
      }
    } while (Clock::now() < until);
  } else {
    // More ranks than cores: the awaited rank may need this core. Yielding hands it over and stays
    // cheaper than a futex sleep and wake-up while the peer is only a time slice behind.
    auto until = Clock::now() + kYieldFor;
    do {
      for (int i = 0; i < 16; ++i) {
        ::sched_yield();
        if (ready()) return Status::Ok();
      }
    } while (Clock::now() < until);
  }
  Control& c = Ctl(q);
  auto next_check = Clock::now() + std::chrono::milliseconds(100);
  while (true) {
    c.waiters.fetch_add(1);
    std::uint32_t seen = c.futex.load();
    if (ready()) {
      c.waiters.fetch_sub(1);
      return Status::Ok();
    }
    timespec ts{0, 2'000'000};  // also bounds a missed wake-up, and how late a peer's giving up is seen
    Futex(&c.futex, FUTEX_WAIT, seen, &ts);
    c.waiters.fetch_sub(1);
    if (ready()) return Status::Ok();
    if (aborted_.load()) return Status::Aborted(StrCat(options_.label, " aborted: ", AbortReason()));
    if (Status gave_up = PeerGaveUp(q, what, round); !gave_up.ok()) {
      // The peer may have given up because the awaited rank died: that is the cause to report.
      COMMKIT_RETURN_IF_ERROR(PeerGone(q, what));
      return gave_up;
    }
    auto now = Clock::now();
    if (now >= deadline)
      return Status::Timeout(
          StrCat(options_.label, ": rank ", Name(rank_), " timed out waiting for rank ", Name(q), " to ", what));
    if (now >= next_check) {
      next_check = now + std::chrono::milliseconds(100);
      COMMKIT_RETURN_IF_ERROR(PeerGone(q, what));
    }
  }
}

Result<std::uint8_t*> ShmTransport::WaitForSlot(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    std::atomic<std::uint64_t>& done = Ctl(q).done.value;
    Status st = WaitOn(
        q, [&] { return done.load(std::memory_order_acquire) >= s - 2; }, deadline,
        "finish reading this rank's previous buffer", true);
    if (!st.ok()) return RoundFailed(std::move(st));
  }
  return SlotData(rank_, s);
}

Status ShmTransport::WaitForPosts(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    std::atomic<std::uint64_t>& posted = Header(q, s).step;
    Status st = WaitOn(
        q, [&] { return posted.load(std::memory_order_acquire) >= s; }, deadline, "arrive at this collective", true);
    if (!st.ok()) {
      // Withdrawn: a peer that arrives later waits for this post, sees that this rank gave up and
      // fails, instead of completing a round this rank reports as failed. (One that saw the post
      // already completes it.)
      Header(rank_, s).step.store(s > 2 ? s - 2 : 0, std::memory_order_release);
      return RoundFailed(std::move(st));
    }
  }
  return ComparePosts();
}

Status ShmTransport::Mismatched(int q) const {
  return Status::Mismatch(
      StrCat(options_.label, ": rank ", Name(q), " issued a different collective than rank ", Name(rank_)));
}

Status ShmTransport::WaitReduced(Deadline deadline, int only, std::chrono::microseconds spin) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || (only >= 0 && q != only)) continue;
    std::atomic<std::uint64_t>& reduced = Ctl(q).reduced.value;
    Status st = WaitOn(
        q, [&] { return reduced.load(std::memory_order_acquire) >= s; }, deadline, "finish its part of the reduction",
        true, spin);
    if (!st.ok()) return RoundFailed(std::move(st));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// Point-to-point: a byte stream per ordered pair through a ring in the sender's segment. The sender
// owns `written` (in its segment), the receiver owns `consumed` (in its own), so each cache line has
// one writer. Frames: a 16-byte header (tag, size) and the payload, streamed through the ring.

Status ShmTransport::Send(int peer, int tag, const void* data, std::size_t bytes, Deadline deadline) {
  if (options_.ring_bytes == 0)
    return Status::NotSupported(StrCat(options_.label, ": this shared-memory transport has no send/recv rings"));
  std::lock_guard<std::mutex> lock(send_mu_[peer]);
  const std::size_t cap = options_.ring_bytes;
  std::uint8_t* ring = Ring(rank_, peer);
  std::atomic<std::uint64_t>& written = Written(rank_, peer);
  std::atomic<std::uint64_t>& consumed = Consumed(peer, rank_);
  std::uint64_t w = written.load(std::memory_order_relaxed);
  Frame frame{kFrameMagic, tag, bytes};
  auto put = [&](const std::uint8_t* src, std::size_t n) -> Status {
    while (n > 0) {
      COMMKIT_RETURN_IF_ERROR(WaitOn(
          peer, [&] { return w - consumed.load(std::memory_order_acquire) < cap; }, deadline,
          "receive (the send ring to it is full)"));
      std::size_t space = cap - static_cast<std::size_t>(w - consumed.load(std::memory_order_acquire));
      std::size_t pos = static_cast<std::size_t>(w % cap);
      std::size_t chunk = std::min({n, space, cap - pos});
      std::memcpy(ring + pos, src, chunk);
      src += chunk;
      n -= chunk;
      w += chunk;
      written.store(w, std::memory_order_release);
      Wake();
    }
    return Status::Ok();
  };
  COMMKIT_RETURN_IF_ERROR(put(reinterpret_cast<const std::uint8_t*>(&frame), sizeof(frame)));
  return put(static_cast<const std::uint8_t*>(data), bytes);
}

Status ShmTransport::Recv(int peer, int tag, void* data, std::size_t bytes, Deadline deadline) {
  if (options_.ring_bytes == 0)
    return Status::NotSupported(StrCat(options_.label, ": this shared-memory transport has no send/recv rings"));
  std::lock_guard<std::mutex> lock(recv_mu_[peer]);
  const std::size_t cap = options_.ring_bytes;
  const std::uint8_t* ring = Ring(peer, rank_);
  std::atomic<std::uint64_t>& written = Written(peer, rank_);
  std::atomic<std::uint64_t>& consumed = Consumed(rank_, peer);
  std::uint64_t c = consumed.load(std::memory_order_relaxed);
  auto copy_out = [&](std::uint8_t* dst, std::uint64_t from, std::size_t n) {
    while (n > 0) {
      std::size_t pos = static_cast<std::size_t>(from % cap);
      std::size_t chunk = std::min(n, cap - pos);
      std::memcpy(dst, ring + pos, chunk);
      dst += chunk;
      from += chunk;
      n -= chunk;
    }
  };
  COMMKIT_RETURN_IF_ERROR(WaitOn(
      peer, [&] { return written.load(std::memory_order_acquire) - c >= sizeof(Frame); }, deadline, "send"));
  Frame frame{};
  copy_out(reinterpret_cast<std::uint8_t*>(&frame), c, sizeof(frame));
  if (frame.magic != kFrameMagic)
    return Status::DataLoss(
        StrCat(options_.label, ": corrupt send/recv frame from rank ", Name(peer), " (memory overwritten?)"));
  if (frame.tag != tag || frame.bytes != bytes)
    // The frame stays in the ring: a matching recv still gets it.
    return Status::Mismatch(StrCat(options_.label, ": rank ", Name(peer), "'s next message to rank ", Name(rank_),
                                   " has tag ", frame.tag, " and ", frame.bytes, " bytes, but this recv expects tag ",
                                   tag, " and ", bytes,
                                   " bytes; sends and receives between two ranks must be posted in the same order"));
  c += sizeof(Frame);
  consumed.store(c, std::memory_order_release);
  Wake();
  auto* dst = static_cast<std::uint8_t*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    COMMKIT_RETURN_IF_ERROR(WaitOn(
        peer, [&] { return written.load(std::memory_order_acquire) > c; }, deadline, "send the rest of its message"));
    std::size_t avail = static_cast<std::size_t>(written.load(std::memory_order_acquire) - c);
    std::size_t chunk = std::min(left, avail);
    copy_out(dst, c, chunk);
    dst += chunk;
    left -= chunk;
    c += chunk;
    consumed.store(c, std::memory_order_release);
    Wake();
  }
  return Status::Ok();
}
void ShmTransport::Abort(std::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = std::string(reason);
    aborted_.store(true);
  }
  GiveUp(StrCat("aborted: ", reason));
}

// ---------------------------------------------------------------------------------------------------

std::size_t RotateFromFor(std::string_view cpu_vendor) {
  return cpu_vendor == "GenuineIntel" ? std::size_t{2} << 10 : std::size_t{32} << 10;
}

ShmExchange StoreExchange(const BackendContext& ctx, std::string prefix) {
  return [store = ctx.store, rank = ctx.rank, size = ctx.size, timeout = ctx.timeout, prefix = std::move(prefix)](
             std::string_view step, const std::string& mine) -> Result<std::vector<std::string>> {
    COMMKIT_RETURN_IF_ERROR(store->Set(StrCat(prefix, step, "/", rank), mine));
    std::vector<std::string> keys;
    for (int q = 0; q < size; ++q) keys.push_back(StrCat(prefix, step, "/", q));
    return store->MultiGet(keys, timeout);
  };
}

namespace {
// The control page, and with send/recv one ring counter pair per peer.
std::size_t ControlBytes(int ranks, std::size_t ring_bytes) {
  return ring_bytes == 0 ? kPage : AlignUp(kPage + 2 * 64 * static_cast<std::size_t>(ranks), kPage);
}
}  // namespace

std::size_t ShmTransport::SlotBytesWithin(std::size_t segment_bytes) {
  if (segment_bytes < ControlBytes(1, 0) + 2 * kPage) return 0;
  // Two slots, each a page multiple holding its header line and the data.
  const std::size_t stride = (segment_bytes - ControlBytes(1, 0)) / 2 / kPage * kPage;
  return stride - sizeof(SlotHeader);
}

Result<std::unique_ptr<ShmTransport>> ShmTransport::Connect(int me, int p, const std::string& group,
                                                            const ShmExchange& exchange,
                                                            const ShmTransportOptions& options) {
  static_assert(sizeof(Control) <= kPage);
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->rank_ = me;
  t->size_ = p;
  t->options_ = options;
  t->ctrl_bytes_ = ControlBytes(p, options.ring_bytes);
  t->ring_offset_ = t->ctrl_bytes_;
  t->slot_offset_ = AlignUp(t->ring_offset_ + options.ring_bytes * p, kPage);
  t->slot_stride_ = AlignUp(sizeof(SlotHeader) + options.slot_bytes, kPage);
  t->segment_bytes_ = t->slot_offset_ + 2 * t->slot_stride_;
  t->send_mu_.reset(new std::mutex[p]);
  t->recv_mu_.reset(new std::mutex[p]);
  const std::string who = StrCat(options.label, ", rank ", me, "/", p, " of ", group);
  const std::string set_the_same =
      options.size_setting.empty() ? std::string() : StrCat(": set ", options.size_setting, " the same on every rank");

  // 1. Who shares this host's /dev/shm: hostname, boot id, IPC and mount namespaces.
  std::string token;
  if (me == 0) {
    std::random_device rd;
    token = StrCat(std::hex, (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()));
  }
  std::string domain = shm::ShmDomain();
  auto ids =
      exchange("id", StrCat(domain, "\n", ::getpid(), "\n", shm::PidNamespace(), "\n", token, "\n", t->segment_bytes_));
  if (!ids.ok()) return ids.status().WithContext(StrCat(who, ": waiting for every rank to arrive"));
  if (ids->size() != static_cast<std::size_t>(p))
    return Status::Internal(StrCat(who, ": the exchange returned ", ids->size(), " entries for ", p, " ranks"));
  std::map<std::string, std::vector<int>> hosts;
  std::vector<std::vector<std::string>> fields(p);
  for (int q = 0; q < p; ++q) {
    fields[q] = commkit::Split((*ids)[q], '\n');
    if (fields[q].size() != 5) return Status::DataLoss(StrCat(who, ": malformed host entry of rank ", q));
    hosts[fields[q][0]].push_back(q);
  }
  if (hosts.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [id, ranks] : hosts) {
      std::vector<std::string> rs;
      for (int q : ranks) rs.push_back(std::to_string(q));
      parts.push_back(StrCat("ranks ", Join(rs, ","), " on ", id.substr(0, id.find('|'))));
    }
    return Status::Unavailable(StrCat(who, ": the ranks do not share one host's /dev/shm (", Join(parts, "; "),
                                      "; same host name means different containers or IPC namespaces)"));
  }
  for (int q = 0; q < p; ++q) {
    if (fields[q][4] != fields[me][4])
      return Status::Mismatch(StrCat(who, ": rank ", q, " uses a ", fields[q][4], "-byte segment and rank ", me, " a ",
                                     fields[me][4], "-byte one", set_the_same));
    auto pid = ParseInt(fields[q][1]);
    t->pids_.push_back(pid && fields[q][2] == fields[me][2] ? static_cast<int>(*pid) : 0);
  }
  token = fields[0][3];
  t->spin_ = static_cast<unsigned>(p) <= std::max(1u, std::thread::hardware_concurrency());
  auto name = [&](int q) { return StrCat("/commkit.", token, ".", q); };

  // 2. This rank's segment; every rank learns whether every other one got its memory.
  t->segments_.resize(p);
  const std::string shrink = options.size_setting.empty() ? std::string()
                                                          : StrCat("shrink the ", options.label, "'s buffers with ",
                                                                   options.size_setting, "=262144");
  auto mine = shm::ShmSegment::Create(name(me), t->segment_bytes_, shrink);
  if (mine.ok()) {
    t->segments_[me] = std::move(mine).value();
    Control* c = new (t->segments_[me].data()) Control();
    c->pid = ::getpid();
    c->magic = kMagic;
  }
  auto ready = exchange("ready", mine.ok() ? "ok" : mine.status().ToString());
  if (!ready.ok()) return ready.status().WithContext(StrCat(who, ": waiting for every rank's shared memory"));
  for (int q = 0; q < p; ++q)
    if ((*ready)[q] != "ok")
      return Status::Unavailable(
          StrCat(who, ": rank ", q, " could not create its shared-memory segment: ", (*ready)[q]));

  // 3. Map every peer's; then the names go (the mappings stay).
  std::string mapped = "ok";
  for (int q = 0; q < p && mapped == "ok"; ++q) {
    if (q == me) continue;
    auto seg = shm::ShmSegment::Open(name(q), t->segment_bytes_, options.size_setting);
    if (!seg.ok()) {
      mapped = seg.status().ToString();
    } else if (reinterpret_cast<Control*>(seg->data())->magic != kMagic) {
      mapped = StrCat("segment ", name(q), " of rank ", q, " is not initialised");
    } else {
      t->segments_[q] = std::move(seg).value();
    }
  }
  auto maps = exchange("mapped", mapped);
  t->segments_[me].Unlink();
  if (!maps.ok()) return maps.status().WithContext(StrCat(who, ": waiting for every rank to map the segments"));
  for (int q = 0; q < p; ++q)
    if ((*maps)[q] != "ok")
      return Status::Unavailable(StrCat(who, ": rank ", q, " could not map the shared memory: ", (*maps)[q]));
  if (me == 0)
    COMMKIT_LOG_INFO(who, ": ", p,
                     " ranks on one host, shared memory: ", HumanBytes(static_cast<double>(t->segment_bytes_)),
                     " per rank (2 x ", HumanBytes(static_cast<double>(options.slot_bytes)), " slots), ",
                     t->spin_ ? "spin-then-sleep" : "sleep (more ranks than cores)", " waiting");
  return t;
}

}  // namespace commkit::comm
