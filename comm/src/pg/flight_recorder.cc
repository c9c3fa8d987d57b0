#include "commkit/comm/flight_recorder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "commkit/comm/launch_env.h"
#include "commkit/common/env.h"
#include "commkit/common/file_io.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "flight_clock.h"

namespace commkit {

std::string_view ToString(FlightState state) {
  switch (state) {
    case FlightState::kScheduled: return "scheduled";
    case FlightState::kStarted: return "started";
    case FlightState::kCompleted: return "completed";
    case FlightState::kFailed: return "failed";
  }
  return "?";
}

namespace {

constexpr std::uint64_t kStateMask = 0xff;
constexpr int kSeqShift = 16;

bool IsP2p(CollectiveKind kind) { return kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv; }

std::uint64_t Elements(const CollectiveArgs& a) {
  std::uint64_t n = a.count;
  for (std::size_t c : a.counts) n += c;
  return n;
}

// "USR1", "SIGUSR2", "34" -> the signal; "off"/"none"/"0"/"" -> 0.
Result<int> ParseSignal(std::string_view text) {
  std::string t = ToLower(Trim(text));
  if (t.empty() || t == "off" || t == "none" || t == "0" || t == "no") return 0;
  if (StartsWith(t, "sig")) t = t.substr(3);
  if (t == "usr1") return SIGUSR1;
  if (t == "usr2") return SIGUSR2;
  if (auto n = ParseInt(t); n && (*n == SIGUSR1 || *n == SIGUSR2 || (*n >= SIGRTMIN && *n <= SIGRTMAX)))
    return static_cast<int>(*n);
  return Status::InvalidArgument(StrCat("COMMKIT_FLIGHT_RECORDER_SIGNAL=", text,
                                        ": give USR1, USR2, a real-time signal number (", SIGRTMIN, "-", SIGRTMAX,
                                        ") or off"));
}

std::string SignalName(int sig) {
  if (sig == SIGUSR1) return "SIGUSR1";
  if (sig == SIGUSR2) return "SIGUSR2";
  return StrCat("signal ", sig);
}

// $TMPDIR (or /tmp)/commkit-flight-<job id>, or -uid<uid> outside a launcher.
std::string DefaultDumpDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp == '/' ? tmp : "/tmp";
  std::string job;
  if (auto launch = DetectLaunchEnvironment(); launch.ok()) job = launch->job_id;
  std::string safe;
  for (char c : job) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (safe.empty() || safe == "." || safe == "..") safe = StrCat("uid", ::geteuid());
  return StrCat(base, "/commkit-flight-", safe);
}

// The directory exists (made if needed), is a directory and not a symlink; when `private_dir`, it is
// made 0700 and must belong to this user (a shared /tmp: another user may have made it first).
Status PrepareDir(const std::filesystem::path& dir, bool private_dir) {
  std::error_code ec;
  if (private_dir) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, StrCat("flight recorder: cannot create ", dir.string()));
  } else {
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::SystemError(StrCat("flight recorder: cannot create ", dir.string(), ": ", ec.message()));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, StrCat("flight recorder: ", dir.string()));
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(StrCat("flight recorder: ", dir.string(), " is ", DescribeFileType(st.st_mode),
                                          ", not a directory: set COMMKIT_FLIGHT_RECORDER_DIR to a directory"));
  if (private_dir && st.st_uid != ::geteuid())
    return Status::PermissionDenied(StrCat("flight recorder: ", dir.string(), " belongs to uid ", st.st_uid,
                                           ", not this user (", ::geteuid(),
                                           "): set COMMKIT_FLIGHT_RECORDER_DIR to a directory of yours"));
  return Status::Ok();
}

// ---- the process-wide registry: live recorders, the signal handler and its dump thread ----

std::atomic<int> g_signal_pipe{-1};  // write end; lock-free, so the handler may read it

extern "C" void OnFlightSignal(int) {
  const int saved = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char c = 'd';
    (void)!::write(fd, &c, 1);  // non-blocking: a full pipe already holds a pending request
  }
  errno = saved;
}

struct Registry {
  std::mutex mu;
  std::vector<const FlightRecorder*> live;
  int signal = 0;             // the installed signal (0: none)
  std::vector<int> declined;  // signals the application handles itself
  int pipe_read = -1;
  pid_t thread_pid = 0;  // the process the dump thread runs in (a forked child has none)
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // process lifetime: the handler and thread use it
  return *registry;
}

void DumpThread(int fd, int sig) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return;
    char buf[64];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    auto files = DumpFlightRecorders(StrCat(SignalName(sig), " received"));
    if (!files.empty()) COMMKIT_LOG_WARN("flight recorder: ", SignalName(sig), ": wrote ", files.size(), " dump(s), e.g. ", files[0].string());
  }
}

// With the registry's mutex held: installs the handler (one signal per process, the first asked
// for) and a dump thread in every process (fork children included) that has the handler.
void EnsureSignalHandler(Registry& reg, const FlightRecorderOptions& options) {
  const int sig = options.signal;
  if (sig != 0 && reg.signal == 0 && std::find(reg.declined.begin(), reg.declined.end(), sig) == reg.declined.end()) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) return;
    const bool has_handler = (old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL;
    if (has_handler && !options.signal_forced) {
      reg.declined.push_back(sig);
      COMMKIT_LOG_INFO("flight recorder: ", SignalName(sig),
                       " already has a handler: not dumping on it (set COMMKIT_FLIGHT_RECORDER_SIGNAL to take it)");
      return;
    }
    if (reg.pipe_read < 0) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        COMMKIT_LOG_WARN("flight recorder: pipe2: ", std::strerror(errno), "; no dumps on ", SignalName(sig));
        return;
      }
      reg.pipe_read = fds[0];
      g_signal_pipe.store(fds[1]);
    }
    struct sigaction sa {};
    sa.sa_handler = OnFlightSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(sig, &sa, nullptr) != 0) {
      reg.declined.push_back(sig);
      COMMKIT_LOG_WARN("flight recorder: sigaction(", SignalName(sig), "): ", std::strerror(errno));
      return;
    }
    reg.signal = sig;
  }
  if (reg.signal == 0 || reg.thread_pid == ::getpid()) return;
  // Detached, for the process's lifetime: it waits in poll() between signals and holds no lock there.
  reg.thread_pid = ::getpid();
  std::thread(DumpThread, reg.pipe_read, reg.signal).detach();
}

}  // namespace

Result<FlightRecorderOptions> FlightRecorderOptionsFromEnvironment() {
  FlightRecorderOptions o;
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t entries, EnvIntOr("COMMKIT_FLIGHT_RECORDER_ENTRIES", 2048, 0, 65536));
  o.entries = static_cast<std::size_t>(entries);
  COMMKIT_ASSIGN_OR_RETURN(std::optional<std::string> dir, EnvString("COMMKIT_FLIGHT_RECORDER_DIR"));
  o.dump_dir = dir ? *dir : DefaultDumpDir();
  o.dump_dir_is_default = !dir.has_value();
  COMMKIT_ASSIGN_OR_RETURN(o.dump_on_failure, EnvBoolOr("COMMKIT_FLIGHT_RECORDER_DUMP_ON_FAILURE", true));
  COMMKIT_ASSIGN_OR_RETURN(std::optional<std::string> sig, EnvString("COMMKIT_FLIGHT_RECORDER_SIGNAL"));
  COMMKIT_ASSIGN_OR_RETURN(o.signal, ParseSignal(sig.value_or("USR1")));
  o.signal_forced = sig.has_value();
  return o;
}

Status FlightRecorder::CheckEnvironment() {
  COMMKIT_RETURN_IF_ERROR(FlightRecorderOptionsFromEnvironment().status());
  return MetricsRegistry::CheckEnvironment();
}

FlightRecorder::FlightRecorder(GroupInfo info, FlightRecorderOptions options)
    : info_(std::move(info)), options_(std::move(options)), capacity_(options_.entries) {
  flight_clock::Init();
  if (capacity_ > 0) {
    collectives_ = std::make_unique<Slot[]>(capacity_);
    p2p_ = std::make_unique<Slot[]>(capacity_);
  }
  metrics_ = std::make_shared<GroupMetrics>(GroupMetrics::Labels{info_.group, info_.rank, info_.size, info_.backend});
}

std::shared_ptr<FlightRecorder> FlightRecorder::Create(GroupInfo info, FlightRecorderOptions options) {
  std::shared_ptr<FlightRecorder> r(new FlightRecorder(std::move(info), std::move(options)));
  MetricsRegistry::Get().Register(r->metrics_);
  if (r->capacity_ > 0) {
    Registry& reg = GetRegistry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.live.push_back(r.get());
    EnsureSignalHandler(reg, r->options_);
  }
  return r;
}

std::shared_ptr<FlightRecorder> FlightRecorder::FromEnvironment(GroupInfo info) {
  return Create(std::move(info), FlightRecorderOptionsFromEnvironment().value_or(FlightRecorderOptions{}));
}

FlightRecorder::~FlightRecorder() {
  if (capacity_ > 0) {
    Registry& reg = GetRegistry();
    std::lock_guard<std::mutex> lock(reg.mu);  // waits for a signal dump in progress
    reg.live.erase(std::remove(reg.live.begin(), reg.live.end(), this), reg.live.end());
  }
  MetricsRegistry::Get().Unregister(metrics_.get());
}

FlightRecorder::Slot* FlightRecorder::SlotFor(bool p2p, std::uint64_t seq) const {
  return &(p2p ? p2p_ : collectives_)[seq % capacity_];
}

void FlightRecorder::Write(const CollectiveArgs& a, FlightState state, std::int64_t now) {
  Slot& s = *SlotFor(IsP2p(a.kind), a.sequence);
  const std::uint64_t seq = a.sequence << kSeqShift;
  // A seqlock: state 0 marks the slot as being written; readers retry or skip it.
  s.word.store(seq, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.desc.store(static_cast<std::uint64_t>(a.kind) | static_cast<std::uint64_t>(a.dtype) << 8 |
                   static_cast<std::uint64_t>(a.op.kind) << 16 | static_cast<std::uint64_t>(a.memory) << 24 |
                   static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.root)) << 32,
               std::memory_order_relaxed);
  s.peer_tag.store(static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.peer)) |
                       static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.tag)) << 32,
                   std::memory_order_relaxed);
  s.count.store(Elements(a), std::memory_order_relaxed);
  s.fingerprint.store(a.fingerprint, std::memory_order_relaxed);
  s.enqueued_ns.store(now, std::memory_order_relaxed);
  s.started_ns.store(state == FlightState::kStarted ? now : 0, std::memory_order_relaxed);
  s.ended_ns.store(0, std::memory_order_relaxed);
  s.word.store(seq | static_cast<std::uint64_t>(state), std::memory_order_release);
}

void FlightRecorder::Scheduled(const CollectiveArgs& a) {
  if (capacity_ == 0) return;
  Write(a, FlightState::kScheduled, flight_clock::Now());
}

std::int64_t FlightRecorder::Begin(const CollectiveArgs& a) {
  const std::int64_t now = flight_clock::Now();
  metrics_->Started(a.kind);
  if (capacity_ > 0) Write(a, FlightState::kStarted, now);
  return now;
}

std::int64_t FlightRecorder::TicksToNanos(std::int64_t ticks) { return flight_clock::TicksToNanos(ticks); }

std::int64_t FlightRecorder::Started(const CollectiveArgs& a) {
  const std::int64_t now = flight_clock::Now();
  metrics_->Started(a.kind);
  if (capacity_ == 0) return now;
  Slot& s = *SlotFor(IsP2p(a.kind), a.sequence);
  const std::uint64_t seq = a.sequence << kSeqShift;
  // Overwritten already (more operations queued than the ring holds): nothing to update.
  if ((s.word.load(std::memory_order_relaxed) & ~kStateMask) != seq) return now;
  s.started_ns.store(now, std::memory_order_relaxed);
  s.word.store(seq | static_cast<std::uint64_t>(FlightState::kStarted), std::memory_order_release);
  return now;
}

std::int64_t FlightRecorder::Finished(const CollectiveArgs& a, std::int64_t started, const Status& status) {
  const std::int64_t now = flight_clock::Now();
  const bool ok = status.ok();
  metrics_->Finished(a.kind, Elements(a) * SizeOf(a.dtype), flight_clock::TicksToNanos(now - started), ok, now);
  if (capacity_ > 0) {
    Slot& s = *SlotFor(IsP2p(a.kind), a.sequence);
    const std::uint64_t seq = a.sequence << kSeqShift;
    if ((s.word.load(std::memory_order_relaxed) & ~kStateMask) == seq) {
      s.ended_ns.store(now, std::memory_order_relaxed);
      s.word.store(seq | static_cast<std::uint64_t>(status.code()) << 8 |
                       static_cast<std::uint64_t>(ok ? FlightState::kCompleted : FlightState::kFailed),
                   std::memory_order_release);
    }
  }
  if (!ok) DumpOnFailure(a, status);
  return now;
}

void FlightRecorder::DumpOnFailure(const CollectiveArgs& a, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.empty()) return;
    failure_ = StrCat(ToString(a.kind), " #", a.sequence, ": ", status.ToString());
  }
  if (capacity_ == 0 || !options_.dump_on_failure || options_.dump_dir.empty()) return;
  if (failure_dumped_.exchange(true)) return;
  auto path = Dump(StrCat("failure of ", ToString(a.kind), " #", a.sequence));
  if (path.ok()) {
    COMMKIT_LOG_WARN("flight recorder: ", info_.group, " rank ", info_.rank, ": wrote ", path->string(),
                     " (read the dumps of all ranks with: gpudoctor flight ", path->parent_path().string(), ")");
  } else {
    COMMKIT_LOG_WARN("flight recorder: ", path.status().message());
  }
}

FlightDump FlightRecorder::Snapshot(std::string_view reason) const {
  FlightDump d;
  d.version = kFlightRecorderVersion;
  d.rank = info_.rank;
  d.world_size = info_.size;
  d.group = info_.group;
  d.backend = info_.backend;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) d.host = host;
  if (auto launch = DetectLaunchEnvironment(); launch.ok()) d.job = launch->job_id;
  d.pid = ::getpid();
  d.reason = std::string(reason);
  d.dumped_ns = UnixNanos();
  d.capacity = capacity_;
  // Slots hold clock ticks: unix time relative to one anchor read now.
  const std::int64_t anchor_ticks = flight_clock::Now();
  const std::int64_t anchor_unix = UnixNanos();
  auto unix_ns = [&](std::int64_t ticks) {
    return ticks == 0 ? 0 : anchor_unix - flight_clock::TicksToNanos(anchor_ticks - ticks);
  };
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    d.failure = failure_;
  }
  for (int ring = 0; ring < 2 && capacity_ > 0; ++ring) {
    const Slot* slots = ring == 0 ? collectives_.get() : p2p_.get();
    for (std::size_t i = 0; i < capacity_; ++i) {
      const Slot& s = slots[i];
      for (int attempt = 0; attempt < 4; ++attempt) {
        const std::uint64_t w1 = s.word.load(std::memory_order_acquire);
        const auto state = static_cast<FlightState>(w1 & kStateMask);
        if (w1 == 0) break;  // never written
        if ((w1 & kStateMask) == 0) continue;  // being written: try again
        FlightRecord e;
        e.sequence = w1 >> kSeqShift;
        e.p2p = ring == 1;
        const std::uint64_t desc = s.desc.load(std::memory_order_relaxed);
        const std::uint64_t pt = s.peer_tag.load(std::memory_order_relaxed);
        e.count = s.count.load(std::memory_order_relaxed);
        e.fingerprint = s.fingerprint.load(std::memory_order_relaxed);
        e.enqueued_ns = unix_ns(s.enqueued_ns.load(std::memory_order_relaxed));
        e.started_ns = unix_ns(s.started_ns.load(std::memory_order_relaxed));
        e.ended_ns = unix_ns(s.ended_ns.load(std::memory_order_relaxed));
        std::atomic_thread_fence(std::memory_order_acquire);
        const std::uint64_t w2 = s.word.load(std::memory_order_relaxed);
        if ((w2 >> kSeqShift) != e.sequence || (w2 & kStateMask) == 0) continue;  // rewritten meanwhile
        e.kind = static_cast<CollectiveKind>(desc & 0xff);
        e.dtype = static_cast<DataType>((desc >> 8) & 0xff);
        e.reduce = static_cast<ReduceKind>((desc >> 16) & 0xff);
        e.memory = static_cast<MemoryKind>((desc >> 24) & 0xff);
        e.root = static_cast<int>(static_cast<std::int32_t>(desc >> 32));
        e.peer = static_cast<int>(static_cast<std::int32_t>(pt & 0xffffffffu));
        e.tag = static_cast<int>(static_cast<std::int32_t>(pt >> 32));
        e.state = state;
        e.error = static_cast<StatusCode>((w1 >> 8) & 0xff);
        // Fields of a later state than the one read belong to a transition still under way.
        if (state < FlightState::kStarted) e.started_ns = 0;
        if (state < FlightState::kCompleted) e.ended_ns = 0;
        (e.p2p ? d.p2p_operations : d.collectives) = std::max(e.p2p ? d.p2p_operations : d.collectives, e.sequence);
        d.entries.push_back(e);
        break;
      }
    }
  }
  std::sort(d.entries.begin(), d.entries.end(), [](const FlightRecord& a, const FlightRecord& b) {
    if (a.enqueued_ns != b.enqueued_ns) return a.enqueued_ns < b.enqueued_ns;
    if (a.p2p != b.p2p) return !a.p2p;
    return a.sequence < b.sequence;
  });
  return d;
}

std::string FlightRecorder::DumpFileName() const {
  std::string name;
  for (char c : info_.group) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return StrCat(name, "-rank", info_.rank, ".json");
}

Result<std::filesystem::path> FlightRecorder::Dump(std::string_view reason, const std::filesystem::path& dir) const {
  const bool configured = dir.empty();
  const std::filesystem::path where = configured ? std::filesystem::path(options_.dump_dir) : dir;
  if (where.empty())
    return Status::InvalidArgument(StrCat("flight recorder of ", info_.group, " rank ", info_.rank,
                                          ": no dump directory (COMMKIT_FLIGHT_RECORDER_DIR is empty): pass one"));
  COMMKIT_RETURN_IF_ERROR(PrepareDir(where, configured && options_.dump_dir_is_default));
  const std::filesystem::path path = where / DumpFileName();
  COMMKIT_RETURN_IF_ERROR(MetricsRegistry::WriteFile(path, ToJson(reason)).WithContext("flight recorder"));
  return path;
}

std::vector<std::filesystem::path> DumpFlightRecorders(std::string_view reason, const std::filesystem::path& dir) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::filesystem::path> files;
  for (const FlightRecorder* r : reg.live) {
    auto path = r->Dump(reason, dir);
    if (path.ok()) {
      files.push_back(*path);
    } else {
      COMMKIT_LOG_WARN("flight recorder: ", path.status().message());
    }
  }
  return files;
}

}  // namespace commkit
