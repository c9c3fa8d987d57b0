#include "host_transport.h"

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

namespace commkit::comm::host {

namespace {

constexpr std::uint32_t kMagic = 0x43484b53;  // "SKHC"
constexpr std::uint32_t kFrameMagic = 0x50325046;
constexpr std::size_t kPage = 4096;
constexpr std::string_view kShrinkHint = "shrink the host backend's buffers with COMMKIT_HOST_SLOT_BYTES=262144";

struct alignas(64) PaddedCounter {
  std::atomic<std::uint64_t> value{0};
};

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

struct Control {
  PaddedCounter reduced, done;
  alignas(64) std::atomic<std::uint32_t> futex{0};
  std::atomic<std::uint32_t> waiters{0};
  std::atomic<std::uint32_t> aborted{0};
  std::uint32_t magic = 0;
  std::int32_t pid = 0;
  char abort_reason[256] = {};
};
static_assert(sizeof(Control) <= kPage);

// A round's arrival and its fingerprint share one cache line, the one a peer polls: an arriving rank
// costs its peers one cache-line transfer, not one for a counter and one for the fingerprint.
struct SlotHeader {
  std::atomic<std::uint64_t> step;  // written last (release): the round this slot now holds
  std::uint64_t fingerprint;
  alignas(16) std::uint8_t inline_data[Transport::kInlineBytes];  // a payload this small travels here
};
static_assert(sizeof(SlotHeader) == 64);

Transport::~Transport() = default;

Control& Transport::Ctl(int q) const { return *reinterpret_cast<Control*>(segments_[q].data()); }

std::atomic<std::uint64_t>& Transport::Written(int sender, int receiver) const {
  return reinterpret_cast<PaddedCounter*>(segments_[sender].data() + kPage)[receiver].value;
}
std::atomic<std::uint64_t>& Transport::Consumed(int receiver, int sender) const {
  return reinterpret_cast<PaddedCounter*>(segments_[receiver].data() + kPage + 64 * size_)[sender].value;
}
std::uint8_t* Transport::Ring(int sender, int receiver) const {
  return segments_[sender].data() + ring_offset_ + options_.ring_bytes * receiver;
}
SlotHeader& Transport::Header(int q, std::uint64_t step) const {
  return *reinterpret_cast<SlotHeader*>(segments_[q].data() + slot_offset_ + slot_stride_ * (step % 2));
}
std::uint8_t* Transport::SlotData(int q, std::uint64_t step) const {
  return segments_[q].data() + slot_offset_ + slot_stride_ * (step % 2) + sizeof(SlotHeader);
}
const std::uint8_t* Transport::Peer(int q) const { return SlotData(q, step_ + 1); }
std::uint8_t* Transport::InlineData() { return Header(rank_, step_ + 1).inline_data; }
const std::uint8_t* Transport::PeerInline(int q) const { return Header(q, step_ + 1).inline_data; }

void Transport::Wake() {
  Control& c = Ctl(rank_);
  c.futex.fetch_add(1);
  if (c.waiters.load() > 0) Futex(&c.futex, FUTEX_WAKE, INT_MAX, nullptr);
}

Status Transport::PeerGone(int q, const char* what) {
  Control& c = Ctl(q);
  if (c.aborted.load() != 0)
    return Status::Aborted(StrCat("rank ", Name(q), " aborted (", std::string(c.abort_reason, strnlen(c.abort_reason, sizeof(c.abort_reason))),
                                  ") while rank ", Name(rank_), " waited for it to ", what));
  int pid = pids_[q];
  if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
    return Status::RemoteError(StrCat("rank ", Name(q), " (pid ", pid, ") exited while rank ", Name(rank_), " waited for it to ", what));
  return Status::Ok();
}

template <typename Ready>
Status Transport::WaitOn(int q, Ready ready, Deadline deadline, const char* what) {
  if (ready()) return Status::Ok();
  if (spin_) {
    // Ranks have a core each: a peer that is a few microseconds behind is cheaper to spin for.
    auto until = Clock::now() + std::chrono::microseconds(40);
    do {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return Status::Ok();
        CpuRelax();
      }
    } while (Clock::now() < until);
  } else {
    for (int i = 0; i < 3; ++i) {
      ::sched_yield();
      if (ready()) return Status::Ok();
    }
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
    timespec ts{0, 2'000'000};  // also bounds a missed wake-up
    Futex(&c.futex, FUTEX_WAIT, seen, &ts);
    c.waiters.fetch_sub(1);
    if (ready()) return Status::Ok();
    if (aborted_.load()) return Status::Aborted(StrCat("host backend aborted: ", abort_reason_));
    auto now = Clock::now();
    if (now >= deadline)
      return Status::Timeout(StrCat("host backend: rank ", Name(rank_), " timed out waiting for rank ", Name(q), " to ", what));
    if (now >= next_check) {
      next_check = now + std::chrono::milliseconds(100);
      COMMKIT_RETURN_IF_ERROR(PeerGone(q, what));
    }
  }
}

Result<std::uint8_t*> Transport::Begin(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  // This slot was last read in round s-2. A peer that posted round s-1 had finished round s-2 (a rank
  // runs its rounds in order), so when the last WaitPosted saw every peer there, nothing to wait for.
  if (s > 2 && all_posted_ < s - 1) {
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      std::atomic<std::uint64_t>& done = Ctl(q).done.value;
      COMMKIT_RETURN_IF_ERROR(WaitOn(q, [&] { return done.load(std::memory_order_acquire) >= s - 2; }, deadline,
                                     "finish reading this rank's previous buffer"));
    }
  }
  return SlotData(rank_, s);
}

void Transport::Post(std::uint64_t fingerprint) {
  const std::uint64_t s = step_ + 1;
  SlotHeader& h = Header(rank_, s);
  h.fingerprint = fingerprint;
  h.step.store(s, std::memory_order_release);
  Wake();
}

Status Transport::WaitPosted(Deadline deadline) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    std::atomic<std::uint64_t>& posted = Header(q, s).step;
    COMMKIT_RETURN_IF_ERROR(
        WaitOn(q, [&] { return posted.load(std::memory_order_acquire) >= s; }, deadline, "arrive at this collective"));
  }
  all_posted_ = s;
  // When the fingerprints are not all equal, every rank differs from at least one other: all ranks
  // report the mismatch in the same round, and finish it, so the round counters stay aligned.
  const std::uint64_t mine = Header(rank_, s).fingerprint;
  for (int q = 0; q < size_; ++q) {
    if (Header(q, s).fingerprint != mine)
      return Status::Mismatch(StrCat("host backend: rank ", Name(q), " issued a different collective than rank ", Name(rank_)));
  }
  return Status::Ok();
}

void Transport::SignalReduced() {
  Ctl(rank_).reduced.value.store(step_ + 1, std::memory_order_release);
  Wake();
}

Status Transport::WaitReduced(Deadline deadline, int only) {
  const std::uint64_t s = step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || (only >= 0 && q != only)) continue;
    std::atomic<std::uint64_t>& reduced = Ctl(q).reduced.value;
    COMMKIT_RETURN_IF_ERROR(WaitOn(q, [&] { return reduced.load(std::memory_order_acquire) >= s; }, deadline,
                                   "finish its part of the reduction"));
  }
  return Status::Ok();
}

// No wake-up: a peer waits for `done` only in a Begin() whose previous round failed (see Begin), and
// its sleep is bounded by the futex timeout; every round's success path skips the atomic increment.
void Transport::Finish() {
  ++step_;
  Ctl(rank_).done.value.store(step_, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------------
// Point-to-point: a byte stream per ordered pair through a ring in the sender's segment. The sender
// owns `written` (in its segment), the receiver owns `consumed` (in its own), so each cache line has
// one writer. Frames: a 16-byte header (tag, size) and the payload, streamed through the ring.

Status Transport::Send(int peer, int tag, const void* data, std::size_t bytes, Deadline deadline) {
  std::lock_guard<std::mutex> lock(send_mu_[peer]);
  const std::size_t cap = options_.ring_bytes;
  std::uint8_t* ring = Ring(rank_, peer);
  std::atomic<std::uint64_t>& written = Written(rank_, peer);
  std::atomic<std::uint64_t>& consumed = Consumed(peer, rank_);
  std::uint64_t w = written.load(std::memory_order_relaxed);
  Frame frame{kFrameMagic, tag, bytes};
  auto put = [&](const std::uint8_t* src, std::size_t n) -> Status {
    while (n > 0) {
      COMMKIT_RETURN_IF_ERROR(WaitOn(peer, [&] { return w - consumed.load(std::memory_order_acquire) < cap; }, deadline,
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

Status Transport::Recv(int peer, int tag, void* data, std::size_t bytes, Deadline deadline) {
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
  COMMKIT_RETURN_IF_ERROR(WaitOn(peer, [&] { return written.load(std::memory_order_acquire) - c >= sizeof(Frame); },
                                 deadline, "send"));
  Frame frame{};
  copy_out(reinterpret_cast<std::uint8_t*>(&frame), c, sizeof(frame));
  if (frame.magic != kFrameMagic)
    return Status::DataLoss(StrCat("host backend: corrupt send/recv frame from rank ", Name(peer), " (memory overwritten?)"));
  if (frame.tag != tag || frame.bytes != bytes)
    // The frame stays in the ring: a matching recv still gets it.
    return Status::Mismatch(StrCat("host backend: rank ", Name(peer), "'s next message to rank ", Name(rank_), " has tag ", frame.tag,
                                   " and ", frame.bytes, " bytes, but this recv expects tag ", tag, " and ", bytes,
                                   " bytes; sends and receives between two ranks must be posted in the same order"));
  c += sizeof(Frame);
  consumed.store(c, std::memory_order_release);
  Wake();
  auto* dst = static_cast<std::uint8_t*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    COMMKIT_RETURN_IF_ERROR(
        WaitOn(peer, [&] { return written.load(std::memory_order_acquire) > c; }, deadline, "send the rest of its message"));
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

void Transport::Abort(std::string_view reason) {
  if (aborted_.exchange(true)) return;
  abort_reason_ = std::string(reason);
  Control& c = Ctl(rank_);
  std::size_t n = std::min(reason.size(), sizeof(c.abort_reason) - 1);
  std::memcpy(c.abort_reason, reason.data(), n);
  c.abort_reason[n] = '\0';
  c.aborted.store(1);
  Wake();
}

// ---------------------------------------------------------------------------------------------------

Result<std::unique_ptr<Transport>> Transport::Connect(const BackendContext& ctx, const TransportOptions& options) {
  std::unique_ptr<Transport> t(new Transport());
  const int me = ctx.rank, p = ctx.size;
  t->rank_ = me;
  t->size_ = p;
  t->options_ = options;
  t->ctrl_bytes_ = AlignUp(kPage + 2 * 64 * static_cast<std::size_t>(p), kPage);
  t->ring_offset_ = t->ctrl_bytes_;
  t->slot_offset_ = AlignUp(t->ring_offset_ + options.ring_bytes * p, kPage);
  t->slot_stride_ = AlignUp(sizeof(SlotHeader) + options.slot_bytes, kPage);
  t->segment_bytes_ = t->slot_offset_ + 2 * t->slot_stride_;
  t->send_mu_.reset(new std::mutex[p]);
  t->recv_mu_.reset(new std::mutex[p]);
  const std::string who = StrCat("host backend, rank ", me, "/", p, " of ", ctx.group_name);
  Store& store = *ctx.store;
  auto all_keys = [&](std::string_view what) {
    std::vector<std::string> keys;
    for (int q = 0; q < p; ++q) keys.push_back(StrCat("host/", what, "/", q));
    return keys;
  };

  // 1. Who shares this host's /dev/shm: hostname, boot id, IPC and mount namespaces.
  std::string token;
  if (me == 0) {
    std::random_device rd;
    token = StrCat(std::hex, (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()));
  }
  std::string domain = shm::ShmDomain();
  COMMKIT_RETURN_IF_ERROR(store.Set(StrCat("host/id/", me), StrCat(domain, "\n", ::getpid(), "\n", shm::PidNamespace(), "\n",
                                                                   token, "\n", t->segment_bytes_))
                              .WithContext(who));
  auto ids = store.MultiGet(all_keys("id"), ctx.timeout);
  if (!ids.ok()) return ids.status().WithContext(StrCat(who, ": waiting for every rank to arrive"));
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
                                      "; same host name means different containers or IPC namespaces). The host "
                                      "backend works within one host; use gloo or mpi across hosts"));
  }
  for (int q = 0; q < p; ++q) {
    if (fields[q][4] != fields[me][4])
      return Status::Mismatch(StrCat(who, ": rank ", q, " uses a ", fields[q][4], "-byte segment and rank ", me, " a ",
                                     fields[me][4], "-byte one: set COMMKIT_HOST_SLOT_BYTES the same on every rank"));
    auto pid = ParseInt(fields[q][1]);
    t->pids_.push_back(pid && fields[q][2] == fields[me][2] ? static_cast<int>(*pid) : 0);
  }
  token = fields[0][3];
  t->spin_ = static_cast<unsigned>(p) <= std::max(1u, std::thread::hardware_concurrency());
  auto name = [&](int q) { return StrCat("/commkit.", token, ".", q); };

  // 2. This rank's segment; every rank learns whether every other one got its memory.
  t->segments_.resize(p);
  auto mine = shm::ShmSegment::Create(name(me), t->segment_bytes_, kShrinkHint);
  if (mine.ok()) {
    t->segments_[me] = std::move(mine).value();
    Control* c = new (t->segments_[me].data()) Control();
    c->pid = ::getpid();
    c->magic = kMagic;
  }
  COMMKIT_RETURN_IF_ERROR(store.Set(StrCat("host/ready/", me), mine.ok() ? "ok" : mine.status().ToString()).WithContext(who));
  auto ready = store.MultiGet(all_keys("ready"), ctx.timeout);
  if (!ready.ok()) return ready.status().WithContext(StrCat(who, ": waiting for every rank's shared memory"));
  for (int q = 0; q < p; ++q)
    if ((*ready)[q] != "ok")
      return Status::Unavailable(StrCat(who, ": rank ", q, " could not create its shared-memory segment: ", (*ready)[q]));

  // 3. Map every peer's; then the names go (the mappings stay).
  std::string mapped = "ok";
  for (int q = 0; q < p && mapped == "ok"; ++q) {
    if (q == me) continue;
    auto seg = shm::ShmSegment::Open(name(q), t->segment_bytes_, "COMMKIT_HOST_SLOT_BYTES");
    if (!seg.ok()) {
      mapped = seg.status().ToString();
    } else if (reinterpret_cast<Control*>(seg->data())->magic != kMagic) {
      mapped = StrCat("segment ", name(q), " of rank ", q, " is not initialised");
    } else {
      t->segments_[q] = std::move(seg).value();
    }
  }
  COMMKIT_RETURN_IF_ERROR(store.Set(StrCat("host/mapped/", me), mapped).WithContext(who));
  auto maps = store.MultiGet(all_keys("mapped"), ctx.timeout);
  t->segments_[me].Unlink();
  if (!maps.ok()) return maps.status().WithContext(StrCat(who, ": waiting for every rank to map the segments"));
  for (int q = 0; q < p; ++q)
    if ((*maps)[q] != "ok")
      return Status::Unavailable(StrCat(who, ": rank ", q, " could not map the shared memory: ", (*maps)[q]));
  if (me == 0)
    COMMKIT_LOG_INFO(who, ": ", p, " ranks on one host, shared memory: ", HumanBytes(static_cast<double>(t->segment_bytes_)),
                     " per rank (2 x ", HumanBytes(static_cast<double>(options.slot_bytes)), " slots), ",
                     t->spin_ ? "spin-then-sleep" : "sleep (more ranks than cores)", " waiting");
  return t;
}

}  // namespace commkit::comm::host
