#include "health.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "validate.h"

namespace commkit {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::int64_t UnixMs() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string OpName(const CollectiveArgs& args) { return StrCat(ToString(args.kind), " #", args.sequence); }

// A small kernel-generated file (/proc); empty when it cannot be read.
std::string ReadSmallProcFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[512];
  while (out.size() < 4096) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

struct ProcStat {
  char state = '?';
  std::uint64_t start = 0;
};

// /proc/<pid>/stat: the state (field 3) and the start time (field 22). The command name (field 2) may
// hold spaces and parentheses, so fields are counted from the last ')'.
std::optional<ProcStat> ReadProcStat(const std::string& pid) {
  std::string text = ReadSmallProcFile(StrCat("/proc/", pid, "/stat"));
  auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  auto fields = Split(std::string_view(text).substr(close + 1), ' ', /*skip_empty=*/true);
  if (fields.size() < 20) return std::nullopt;
  ProcStat s;
  s.state = fields[0].empty() ? '?' : fields[0][0];
  auto start = ParseInt(fields[19]);
  if (start && *start >= 0) s.start = static_cast<std::uint64_t>(*start);
  return s;
}

// The boot and pid namespace this process runs in: pids of two processes compare only when both match.
std::string PidNamespace() {
  std::string boot = std::string(Trim(ReadSmallProcFile("/proc/sys/kernel/random/boot_id")));
  char link[128] = {0};
  ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (boot.empty() || n <= 0) return {};
  std::string id = StrCat(boot, "/", std::string_view(link, static_cast<std::size_t>(n)));
  for (char& c : id)
    if (c == ' ') c = '_';
  return id;
}

const RankProgress& Self() {
  static const RankProgress self = [] {
    RankProgress p;
    p.pid = ::getpid();
    if (auto st = ReadProcStat("self")) p.start = st->start;
    p.pid_namespace = PidNamespace();
    return p;
  }();
  return self;
}

// Runs `fn` on a thread of its own and waits for its result until `deadline`; nullopt when it did not
// answer in time (the thread then finishes on its own: `fn` must own, not borrow, what it uses).
template <typename T, typename F>
std::optional<T> CallWithDeadline(F fn, Clock::time_point deadline) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> value;
  };
  auto slot = std::make_shared<Slot>();
  std::thread thread([slot, fn = std::move(fn)]() mutable {
    T v = fn();
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->value = std::move(v);
    }
    slot->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(slot->mu);
  const bool answered = slot->cv.wait_until(lock, deadline, [&] { return slot->value.has_value(); });
  std::optional<T> value = slot->value;
  lock.unlock();
  // Joined when it answered (it is about to return: what it owns is released here, not later on a
  // thread of its own), abandoned otherwise.
  if (answered) {
    thread.join();
  } else {
    thread.detach();
  }
  return value;
}

// Every peer's progress entry (nullopt for one never published), or the store's error.
using Snapshot = Result<std::vector<std::optional<RankProgress>>>;

Snapshot ReadSnapshot(const std::shared_ptr<Store>& store, const std::vector<std::string>& keys) {
  std::vector<std::optional<RankProgress>> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto present = store->Check({keys[i]});
    if (!present.ok()) return present.status();
    if (!*present) continue;
    auto v = store->Get(keys[i], milliseconds(200));
    if (!v.ok()) return v.status();
    out[i] = ParseProgress(*v);
  }
  return out;
}

}  // namespace

std::string FormatProgress(const RankProgress& p) {
  return StrCat(p.seq, " ", p.when, " ", p.pid, " ", p.start, " ", p.pid_namespace.empty() ? "-" : p.pid_namespace, " ",
                p.failed);
}

std::optional<RankProgress> ParseProgress(std::string_view text) {
  auto parts = Split(text, ' ');
  if (parts.size() < 2) return std::nullopt;
  auto seq = ParseInt(parts[0]);
  auto when = ParseInt(parts[1]);
  if (!seq || !when) return std::nullopt;
  RankProgress p;
  p.seq = *seq;
  p.when = *when;
  if (parts.size() >= 5) {
    auto pid = ParseInt(parts[2]);
    auto start = ParseInt(parts[3]);
    if (pid && start && *pid > 0 && *start >= 0) {
      p.pid = *pid;
      p.start = static_cast<std::uint64_t>(*start);
      p.pid_namespace = parts[4] == "-" ? "" : parts[4];
    }
  }
  if (parts.size() >= 6) {
    auto failed = ParseInt(parts[5]);
    if (failed && *failed >= 0) p.failed = *failed;
  }
  return p;
}

RankProgress SelfIdentity() { return Self(); }

std::optional<std::string> DeadProcess(const RankProgress& p) {
  const RankProgress& self = Self();
  if (p.pid <= 0 || p.pid_namespace.empty() || p.pid_namespace != self.pid_namespace) return std::nullopt;
  if (p.pid == self.pid) return std::nullopt;  // ranks that are threads of this process
  auto st = ReadProcStat(std::to_string(p.pid));
  if (!st) return StrCat("process ", p.pid, " exited");
  if (p.start != 0 && st->start != p.start) return StrCat("process ", p.pid, " exited");  // the pid was reused
  if (st->state == 'Z' || st->state == 'X') return StrCat("process ", p.pid, " is dead (a zombie not yet reaped)");
  return std::nullopt;
}

struct Health::Shared {
  std::shared_ptr<Store> store;
  std::string key;
  std::vector<int> peers;              // the ranks a diagnosis looks at (at most kMaxNamed)
  std::vector<std::string> peer_keys;  // their progress keys
  // The peers' process identities, read once all have published: a diagnosis still has them (for
  // the same-host death checks) when the store is gone with its host.
  std::mutex id_mu;
  std::vector<std::optional<RankProgress>> identities;  // guarded by id_mu
  std::atomic<std::uint64_t> entered{0};
  std::atomic<std::uint64_t> failed{0};
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool exited = false;
};

namespace {

// Publishes "progress/<rank>": on change (at most every 100 ms) and as a heartbeat every kHeartbeat,
// so a failing rank can tell lagging peers from dead ones. A failed store call ends it: the store is
// gone (typically rank 0, its host, exited) and retrying would only hold up this rank's exit.
// Once every peer has published (Check never blocks; tried every 20 ms until then), one MultiGet
// caches their identities.
void CacheIdentities(Health::Shared& s) {
  auto present = s.store->Check(s.peer_keys);
  if (!present.ok() || !*present) return;
  auto values = s.store->MultiGet(s.peer_keys, milliseconds(1000));
  if (!values.ok()) return;
  std::vector<std::optional<RankProgress>> ids;
  for (const auto& v : *values) ids.push_back(ParseProgress(v));
  std::lock_guard<std::mutex> lock(s.id_mu);
  s.identities = std::move(ids);
}

// Writes this rank's "progress/<rank>" entry: its identity, the last collective it entered and the
// one it saw fail, stamped now.
Status Publish(Health::Shared& s, std::uint64_t seq, std::uint64_t failed) {
  RankProgress p = Self();
  p.seq = static_cast<std::int64_t>(seq);
  p.failed = static_cast<std::int64_t>(failed);
  p.when = UnixMs();
  return s.store->Set(s.key, FormatProgress(p));
}

void PublishLoop(const std::shared_ptr<Health::Shared>& s, std::chrono::milliseconds heartbeat, bool first_published) {
  std::uint64_t published = first_published ? 0 : ~0ull, published_failed = 0;
  auto last = Clock::now();
  bool have_identities = s->peers.empty();
  for (bool first = true;; first = false) {
    {
      std::unique_lock<std::mutex> lock(s->mu);
      // A failure is published at once: peers diagnosing the same failure must not take this rank,
      // which exits right after reporting it, for a dead one. Until the peers' identities are cached
      // the loop looks every 20 ms: a peer that dies right after the first collective is named dead
      // from them when the store died with it.
      const auto wait = first ? milliseconds(0) : have_identities ? milliseconds(100) : milliseconds(20);
      s->cv.wait_for(lock, wait, [&] { return s->stopping || s->failed.load() != published_failed; });
      if (s->stopping) break;
    }
    if (!have_identities) {
      CacheIdentities(*s);
      std::lock_guard<std::mutex> lock(s->id_mu);
      have_identities = !s->identities.empty();
    }
    std::uint64_t seq = s->entered.load();
    std::uint64_t failed = s->failed.load();
    if (seq == published && failed == published_failed && Clock::now() - last < heartbeat) continue;
    Status st = Publish(*s, seq, failed);
    if (!st.ok()) {
      COMMKIT_LOG_DEBUG("progress heartbeat ", s->key, " stopped: ", st.ToString());
      break;
    }
    published = seq;
    published_failed = failed;
    last = Clock::now();
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->exited = true;
  }
  s->cv.notify_all();
}

}  // namespace

Health::Health(std::shared_ptr<Store> store, int rank, int size, std::string who)
    : shared_(std::make_shared<Shared>()), rank_(rank), size_(size), who_(std::move(who)) {
  shared_->store = std::move(store);
  shared_->key = StrCat("progress/", rank_);
  for (int r = 0; r < size_ && static_cast<int>(shared_->peers.size()) < kMaxNamed; ++r) {
    if (r == rank_) continue;
    shared_->peers.push_back(r);
    shared_->peer_keys.push_back(StrCat("progress/", r));
  }
  // Published before the first collective, not by the heartbeat thread later: once any collective has
  // completed, every peer's entry is in the store.
  Status first = Publish(*shared_, 0, 0);
  if (!first.ok()) COMMKIT_LOG_DEBUG("progress entry ", shared_->key, " not published: ", first.ToString());
  publisher_ = std::thread([s = shared_, published = first.ok()] { PublishLoop(s, kHeartbeat, published); });
}

void Health::Stop() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  if (shared_->stopping) return;  // waited (or gave up waiting) already
  shared_->stopping = true;
  shared_->cv.notify_all();
  const bool exited = shared_->cv.wait_for(lock, kStopWait, [&] { return shared_->exited; });
  lock.unlock();
  // Joined when it stopped (it owns a reference to the store: released here, not at some later point
  // on a thread of its own); abandoned inside a store call that does not answer (the store's host is
  // gone and the client keeps retrying its connection).
  if (exited) {
    publisher_.join();
  } else {
    COMMKIT_LOG_DEBUG(who_, ": the progress heartbeat is inside a store call that does not answer; not waiting for it");
    publisher_.detach();
  }
}

// Relaxed: the heartbeat thread only needs to see the value eventually (it looks every 100 ms), and
// a sequentially consistent store is a locked instruction on every collective.
void Health::Entered(std::uint64_t seq) { shared_->entered.store(seq, std::memory_order_relaxed); }

std::optional<RankProgress> Health::Identity(std::size_t peer_index) const {
  std::lock_guard<std::mutex> lock(shared_->id_mu);
  if (peer_index >= shared_->identities.size()) return std::nullopt;
  return shared_->identities[peer_index];
}

// Reads every peer's progress, then polls until each is settled: its process is dead (same host), or
// its entry was published after this failure (same host: by its timestamp; elsewhere: it changed
// since the first read), so what it says is not older than the failure. A peer still unsettled at the
// end of the budget sent no heartbeat meanwhile: dead or hung. A live rank that reached the operation
// is never named, and when the store stops answering nothing but dead processes is named.
Status Health::Diagnose(const CollectiveArgs& args, const Status& failure) {
  const std::int64_t failure_ms = UnixMs();
  if (args.kind != CollectiveKind::kSend && args.kind != CollectiveKind::kRecv) {
    shared_->failed.store(args.sequence);
    shared_->cv.notify_all();
  }
  const auto deadline = Clock::now() + kDiagnoseBudget;
  const std::vector<int>& peers = shared_->peers;
  const std::vector<std::string>& keys = shared_->peer_keys;
  struct View {
    std::optional<RankProgress> first, latest;
    std::optional<std::string> dead;
    bool settled = false;
  };
  std::vector<View> views(peers.size());
  const std::string& ns = Self().pid_namespace;
  bool store_failed = false;
  std::string store_error;
  std::int64_t last_read_ms = 0;  // when the last snapshot that answered was read
  auto settle = [&](View& v) {
    if (v.settled || !v.latest) return;
    v.dead = DeadProcess(*v.latest);
    const bool same_clock = !ns.empty() && v.latest->pid_namespace == ns;
    const bool moved = v.first && (v.latest->when != v.first->when || v.latest->seq != v.first->seq);
    // Timestamps are milliseconds: an entry from the failure's own millisecond may precede it (a rank
    // that published its last heartbeat and stopped in that millisecond), so only a later one counts.
    v.settled = v.dead.has_value() || moved || (same_clock && v.latest->when > failure_ms) ||
                static_cast<std::uint64_t>(v.latest->failed) >= args.sequence;
  };
  std::shared_ptr<Store> store = shared_->store;
  for (bool first_round = true;; first_round = false) {
    if (!first_round) {
      bool all = true;
      for (const View& v : views) all = all && v.settled;
      if (all || Clock::now() + milliseconds(100) >= deadline) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    const std::int64_t read_ms = UnixMs();
    std::optional<Snapshot> answer =
        CallWithDeadline<Snapshot>([store, keys] { return ReadSnapshot(store, keys); }, deadline);
    if (!answer || !answer->ok()) {
      store_failed = true;
      store_error = answer ? answer->status().message()
                           : StrCat("no answer within ", HumanSeconds(static_cast<double>(kDiagnoseBudget.count()) / 1000.0));
      break;
    }
    const auto& snap = answer->value();
    last_read_ms = read_ms;
    for (std::size_t i = 0; i < views.size(); ++i) {
      if (!snap[i]) continue;
      if (!views[i].first) views[i].first = snap[i];
      views[i].latest = snap[i];
      settle(views[i]);
    }
  }
  std::vector<std::string> behind, stopped, also_failed;
  const std::int64_t now = UnixMs();
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const int r = peers[i];
    const View& v = views[i];
    if (!v.latest) {
      if (!store_failed) {
        behind.push_back(StrCat(r, " (never started an operation)"));
      } else if (std::optional<RankProgress> id = Identity(i)) {
        // The store is gone, but the process identity read earlier still tells a dead peer.
        if (auto dead = DeadProcess(*id)) stopped.push_back(StrCat(r, " (", *dead, "; its last operation is unknown)"));
      }
      continue;
    }
    const RankProgress& p = *v.latest;
    const bool reached = static_cast<std::uint64_t>(p.seq) >= args.sequence;
    // A peer that saw this operation fail too is not missing, even once it has exited.
    if (p.failed > 0 && static_cast<std::uint64_t>(p.failed) >= args.sequence) {
      also_failed.push_back(std::to_string(r));
      continue;
    }
    std::string note;
    if (v.dead) {
      note = StrCat(", ", *v.dead);
    } else if (store_failed && !v.settled) {
      // The store failed before this peer's entry was known to be fresh. A peer publishes a change of
      // operation within 100 ms: an entry still behind at a read after the failure and at least
      // kPublishLag after its publication says where the peer was at (about) the failure; anything
      // else may be stale, and a live rank must not be named on stale information.
      constexpr std::int64_t kPublishLag = 200;
      const bool same_clock = !ns.empty() && p.pid_namespace == ns;
      if (reached || !same_clock || last_read_ms < failure_ms || last_read_ms - p.when < kPublishLag) continue;
      note = StrCat(", as of ", HumanSeconds(static_cast<double>(now - p.when) / 1000.0),
                    " ago: the store failed since");
    } else if (!v.settled) {
      note = StrCat(", no heartbeat for ", HumanSeconds(static_cast<double>(now - p.when) / 1000.0), ": dead or hung?");
    }
    if (!reached) {
      behind.push_back(StrCat(r, " (last at #", p.seq, note, ")"));
    } else if (!note.empty()) {
      stopped.push_back(StrCat(r, " (inside #", p.seq, note, ")"));
    }
  }
  std::string msg = StrCat(who_, ": ", OpName(args), " (", Describe(args), ") failed: ", failure.message());
  if (!behind.empty()) msg += StrCat("; ranks that never reached ", OpName(args), ": ", Join(behind, ", "));
  if (!stopped.empty()) msg += StrCat("; ranks that stopped responding: ", Join(stopped, ", "));
  if (!also_failed.empty()) msg += StrCat("; ranks that saw ", OpName(args), " fail too: ", Join(also_failed, ", "));
  if (store_failed)
    msg += StrCat("; the group's store failed (", store_error,
                  "), so only ranks whose process is seen dead on this host are named (under mpirun, srun or "
                  "torchrun rank 0 hosts the store: did it exit?)");
  return Status(failure.code(), msg);
}

}  // namespace commkit
