#include "launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "commkit/comm/tcp_store.h"
#include "failure_board.h"
#include "commkit/common/strings.h"

extern char** environ;

namespace commkit::run {

using Clock = std::chrono::steady_clock;

namespace {

std::atomic<int> g_forward_signal{0};

void OnSignal(int sig) { g_forward_signal.store(sig); }

std::string RandomToken() {
  std::random_device rd;
  std::uniform_int_distribution<int> hex(0, 15);
  std::string token;
  for (int i = 0; i < 32; ++i) token += "0123456789abcdef"[hex(rd)];
  return token;
}

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out_partial;
  std::string err_partial;
  std::string err_tail;  // the last few KiB of stderr, for signals reported by libraries' handlers
  bool exited = false;
};

constexpr std::size_t kErrTail = 8 << 10;

void Emit(int fd, const std::string& prefix, std::string_view text) {
  std::string line = prefix;
  line.append(text.data(), text.size());
  line.push_back('\n');
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Reads what a rank wrote and emits complete lines with its prefix. Returns false at EOF.
bool Pump(int& fd, std::string& partial, int out_fd, const std::string& prefix, bool use_prefix,
          std::string* tail = nullptr) {
  char buf[16384];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n > 0 && tail != nullptr) {
    tail->append(buf, static_cast<std::size_t>(n));
    if (tail->size() > kErrTail) tail->erase(0, tail->size() - kErrTail);
  }
  if (n <= 0) {
    if (!partial.empty()) Emit(out_fd, use_prefix ? prefix : "", partial);
    partial.clear();
    ::close(fd);
    fd = -1;
    return false;
  }
  if (!use_prefix) {
    std::string_view rest(buf, static_cast<std::size_t>(n));
    while (!rest.empty()) {
      ssize_t w = ::write(out_fd, rest.data(), rest.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      rest.remove_prefix(static_cast<std::size_t>(w));
    }
    return true;
  }
  partial.append(buf, static_cast<std::size_t>(n));
  std::size_t start = 0;
  for (std::size_t nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n', start)) {
    Emit(out_fd, prefix, std::string_view(partial).substr(start, nl - start));
    start = nl + 1;
  }
  partial.erase(0, start);
  // A rank that writes a huge line without a newline: flush in pieces.
  if (partial.size() > (1 << 20)) {
    Emit(out_fd, prefix, partial);
    partial.clear();
  }
  return true;
}

// The program's path, searched in PATH like execvp does, resolved before fork (see RunLocalRanks).
Result<std::string> ResolveProgram(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("the program name is empty");
  if (name.find('/') != std::string::npos) return name;  // exec reports a missing file itself (exit 127)
  const char* path_env = std::getenv("PATH");
  std::string path = path_env != nullptr && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (const auto& dir : Split(path, ':')) {
    std::string candidate = StrCat(dir.empty() ? "." : std::string(dir), "/", name);
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return Status::NotFound(StrCat("cannot execute '", name, "': not found in PATH (", path, ")"));
}

// This process's environment with `overrides` replacing (or, for an empty value, removing) entries.
// `defaults` are added (even with an empty value) only where this process's environment lacks them.
std::vector<std::string> ChildEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides,
                                          const std::vector<std::pair<std::string, std::string>>& defaults) {
  std::vector<std::string> out;
  std::vector<bool> present(defaults.size(), false);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view key = entry.substr(0, entry.find('='));
    for (std::size_t i = 0; i < defaults.size(); ++i)
      if (defaults[i].first == key) present[i] = true;
    bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& kv) { return kv.first == key; });
    if (!replaced) out.emplace_back(entry);
  }
  for (const auto& [key, value] : overrides)
    if (!value.empty()) out.push_back(StrCat(key, "=", value));
  for (std::size_t i = 0; i < defaults.size(); ++i)
    if (!present[i]) out.push_back(StrCat(defaults[i].first, "=", defaults[i].second));
  return out;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? StrCat("SIG", abbrev) : StrCat("signal ", sig);
}

std::string Describe(const RankExit& e) {
  if (e.signal) return StrCat("was killed by signal ", e.signal, " (", SignalName(e.signal), ": ", strsignal(e.signal), ")");
  if (e.reported_signal)
    return StrCat("died of signal ", e.reported_signal, " (", SignalName(e.reported_signal), ": ",
                  strsignal(e.reported_signal), ") caught by a library's handler, which exited with code ", e.exit_code);
  return StrCat("exited with code ", e.exit_code);
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& LibrarySignalHandlerVariables() {
  // PSM (libinfinipath, pulled in through libfabric's psm provider) and PSM2 install handlers for
  // SIGSEGV and friends unless told not to; UCX's libucs handles error signals (HANDLE_ERRORS,
  // ERROR_SIGNALS: empty = none) and enters debug mode on SIGHUP (DEBUG_SIGNO: 0 = off).
  static const std::vector<std::pair<std::string, std::string>> vars = {
      {"IPATH_NO_BACKTRACE", "1"}, {"HFI_NO_BACKTRACE", "1"}, {"UCX_HANDLE_ERRORS", ""},
      {"UCX_ERROR_SIGNALS", ""},   {"UCX_DEBUG_SIGNO", "0"},
  };
  return vars;
}

int SignalReportedInOutput(std::string_view text) {
  // The last report wins: it is the one closest to the exit.
  int found = 0;
  for (std::string_view marker : {"Caught signal ", "caught signal ", "received signal ", "Received signal "}) {
    std::size_t at = 0;
    while ((at = text.find(marker, at)) != std::string_view::npos) {
      at += marker.size();
      std::size_t end = at;
      while (end < text.size() && end - at < 3 && text[end] >= '0' && text[end] <= '9') ++end;
      auto n = ParseInt(text.substr(at, end - at));
      if (n && *n > 0 && *n < 65) found = static_cast<int>(*n);
    }
  }
  return found;
}

Result<LaunchResult> RunLocalRanks(const LaunchOptions& o) {
  if (o.command.empty()) return Status::InvalidArgument("no program to run (commkit-run -n N -- prog args...)");
  if (o.nproc_per_node < 1) return Status::InvalidArgument("-n must be at least 1");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    return Status::InvalidArgument(StrCat("--node-rank ", o.node_rank, " must be in [0, ", o.nnodes, ")"));
  if (o.nnodes > 1 && o.master_port == 0)
    return Status::InvalidArgument("multi-node jobs need --master-port (every node must agree on it)");

  const int world = o.nproc_per_node * o.nnodes;
  std::string token = RandomToken();
  if (const char* t = std::getenv("COMMKIT_STORE_TOKEN"); t != nullptr && *t) token = t;
  else if (o.nnodes > 1) {
    // Nodes cannot agree on a random token: the store then accepts any client that reaches it.
    token = "";
    if (o.node_rank == 0 && o.host_store)
      std::fprintf(stderr,
                   "commkit-run: warning: COMMKIT_STORE_TOKEN is not set, so the job's store on port %d accepts any "
                   "client; export the same secret as COMMKIT_STORE_TOKEN on every node\n",
                   o.master_port);
  }

  // Node 0 hosts the job's store, like torchrun's agent: it outlives any rank, so rendezvous and
  // failure reports keep working when rank 0 dies. The other nodes' launchers connect to it to share
  // failures. The store takes --master-port or, when something else holds it (torchrun's store), the
  // next free port of StorePortCandidates; the other nodes find it the same way.
  std::unique_ptr<FailureBoard> board;
  int port = o.master_port;
  if (o.host_store) {
    BoardOptions b;
    b.nnodes = o.nnodes;
    b.node_rank = o.node_rank;
    b.master_addr = o.master_addr;
    b.master_port = o.master_port;
    b.token = token;
    b.host = o.node_rank == 0;
    b.connect_timeout = o.store_timeout;
    COMMKIT_ASSIGN_OR_RETURN(board, FailureBoard::Open(b));
    port = board->port();
  }
  if (port == 0 && o.nnodes == 1) {
    // Rank 0 hosts the store: find a free port for it (it binds soon after; the window is small).
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
    if (fd >= 0) ::close(fd);
  }
  if (port == 0) return Status::InvalidArgument("--master-port is required when this node does not host the store");

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // The store server runs threads in this process, so the child may only call async-signal-safe
  // functions between fork and exec (another thread may hold the malloc lock at fork time): argv,
  // the environment and the program path are all prepared here, before forking.
  COMMKIT_ASSIGN_OR_RETURN(std::string program, ResolveProgram(o.command[0]));
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string exec_error = StrCat("commkit-run: cannot execute '", o.command[0], "'\n");

  const pid_t launcher_pid = ::getpid();
  std::vector<Rank> ranks;
  ranks.reserve(o.nproc_per_node);
  // On a launcher error mid-way, the ranks already started must not be left behind.
  auto abandon = [&](Status status) {
    for (auto& r : ranks) {
      ::kill(-r.pid, SIGKILL);
      int ignored = 0;
      ::waitpid(r.pid, &ignored, 0);
      if (r.out_fd >= 0) ::close(r.out_fd);
      if (r.err_fd >= 0) ::close(r.err_fd);
    }
    return status;
  };
  for (int i = 0; i < o.nproc_per_node; ++i) {
    Rank r;
    r.local_rank = i;
    r.rank = o.node_rank * o.nproc_per_node + i;
    std::vector<std::string> env_strings = ChildEnvironment({
        {"RANK", std::to_string(r.rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(i)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"NODE_RANK", std::to_string(o.node_rank)},
        {"GROUP_RANK", std::to_string(o.node_rank)},
        {"NNODES", std::to_string(o.nnodes)},
        {"MASTER_ADDR", o.master_addr},
        {"MASTER_PORT", std::to_string(port)},
        {"COMMKIT_LAUNCHER", "commkit-run"},
        {"COMMKIT_STORE_TOKEN", token},
        {"COMMKIT_STORE_HOSTED", board ? "1" : ""},
    }, o.keep_library_signal_handlers ? std::vector<std::pair<std::string, std::string>>{}
                                      : LibrarySignalHandlerVariables());
    std::vector<char*> envp;
    envp.reserve(env_strings.size() + 1);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return abandon(Status::FromErrno(errno, "pipe"));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      return abandon(Status::FromErrno(e, "pipe"));
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      return abandon(Status::FromErrno(e, "fork"));
    }
    if (pid == 0) {
      // Async-signal-safe calls only from here on.
      ::setpgid(0, 0);
      // The rank dies with the launcher, even when the launcher is SIGKILLed (it cannot forward
      // anything then). The launcher may have died before this line: then exit at once.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(1);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::sigaction(SIGPIPE, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // a blocked mask would be inherited across exec
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execve(program.c_str(), argv.data(), envp.data());
      (void)!::write(STDERR_FILENO, exec_error.data(), exec_error.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);
    r.pid = pid;
    r.out_fd = out[0];
    r.err_fd = err[0];
    ::fcntl(r.out_fd, F_SETFL, O_NONBLOCK);
    ::fcntl(r.err_fd, F_SETFL, O_NONBLOCK);
    ranks.push_back(std::move(r));
  }

  LaunchResult result;
  auto start = Clock::now();
  // The culprit is the first abnormal rank: the first to fail, or one that exited 0 while the others
  // were still running when the job then fails (their failure is the consequence).
  std::optional<RankExit> first_failure, early_exit;
  std::optional<RemoteFailure> remote;  // a failure on another node, first job-wide
  std::optional<Clock::time_point> term_at, kill_at;
  bool sent_term = false, sent_kill = false;
  int forwarded_signal = 0;
  std::string stop_reason;
  auto next_poll = Clock::now(), next_beat = Clock::now();
  auto signal_all = [&](int sig) {
    for (auto& r : ranks)
      if (!r.exited) ::kill(-r.pid, sig);
  };
  auto alive = [&] { return std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return !r.exited; }); };
  auto streams_open = [&] {
    return std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.out_fd >= 0 || r.err_fd >= 0; });
  };

  while (alive() || streams_open()) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> owners;  // rank index, is_stderr
    for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
      if (ranks[i].out_fd >= 0) {
        fds.push_back({ranks[i].out_fd, POLLIN, 0});
        owners.emplace_back(i, false);
      }
      if (ranks[i].err_fd >= 0) {
        fds.push_back({ranks[i].err_fd, POLLIN, 0});
        owners.emplace_back(i, true);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), 100);
    if (rc > 0) {
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Rank& r = ranks[owners[k].first];
        std::string prefix = StrCat("[", r.rank, "] ");
        if (owners[k].second) Pump(r.err_fd, r.err_partial, STDERR_FILENO, prefix, o.prefix, &r.err_tail);
        else Pump(r.out_fd, r.out_partial, STDOUT_FILENO, prefix, o.prefix);
      }
    }
    // Reap.
    for (auto& r : ranks) {
      if (r.exited) continue;
      int status = 0;
      pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      if (done != r.pid) continue;
      r.exited = true;
      // What the rank wrote just before it died may still sit in the pipe.
      if (r.err_fd >= 0) {
        std::string prefix = StrCat("[", r.rank, "] ");
        while (r.err_fd >= 0 && Pump(r.err_fd, r.err_partial, STDERR_FILENO, prefix, o.prefix, &r.err_tail)) {
          pollfd p{r.err_fd, POLLIN, 0};
          if (::poll(&p, 1, 0) <= 0) break;
        }
      }
      RankExit e;
      e.rank = r.rank;
      e.when = Clock::now();
      e.stopped_by_us = sent_term || sent_kill;
      e.killed_by_us = sent_kill;
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      if (e.signal == 0 && e.exit_code != 0) e.reported_signal = SignalReportedInOutput(r.err_tail);
      result.exits.push_back(e);
      bool failed = e.signal != 0 || e.exit_code != 0;
      if (failed && !first_failure && !e.stopped_by_us && !remote) {
        first_failure = e;
        term_at = Clock::now() + o.grace;
        if (board) {
          RemoteFailure mine;
          mine.node = o.node_rank;
          mine.rank = e.rank;
          mine.what = Describe(e);
          mine.exit_code = e.signal ? 128 + e.signal : e.reported_signal ? 128 + e.reported_signal : e.exit_code;
          RemoteFailure first = board->Publish(mine);
          if (first.node != o.node_rank) remote = first;
        }
      } else if (!failed && !first_failure && !early_exit && !e.stopped_by_us && alive()) {
        early_exit = e;
      }
    }
    auto now = Clock::now();
    if (board && now >= next_beat) {
      next_beat = now + std::chrono::seconds(1);
      board->Beat();
    }
    if (board && !remote && now >= next_poll && alive()) {
      next_poll = now + std::chrono::milliseconds(250);
      if (auto f = board->Poll()) {
        remote = f;
        if (!term_at) term_at = now + o.grace;
      }
    }
    if (int sig = g_forward_signal.exchange(0); sig != 0) {
      forwarded_signal = sig;
      stop_reason = StrCat("received ", SignalName(sig), ", forwarded it to every rank");
      signal_all(sig);
      sent_term = true;
      kill_at = now + o.kill_after;
    }
    if (o.timeout.count() > 0 && !sent_term && now - start > o.timeout && alive()) {
      stop_reason = StrCat("job timeout of ", HumanSeconds(o.timeout.count() / 1000.0), " reached");
      term_at = now;
    }
    if (term_at && !sent_term && now >= *term_at && alive()) {
      signal_all(SIGTERM);
      sent_term = true;
      kill_at = now + o.kill_after;
    }
    if (kill_at && !sent_kill && now >= *kill_at && alive()) {
      signal_all(SIGKILL);
      sent_kill = true;
    }
    // Streams of exited ranks whose grandchildren keep the pipe open are closed after the kill.
    if (!alive() && sent_kill) {
      for (auto& r : ranks) {
        for (int* fd : {&r.out_fd, &r.err_fd})
          if (*fd >= 0) {
            ::close(*fd);
            *fd = -1;
          }
      }
    }
    if (!alive() && streams_open() && !sent_kill) {
      // Grandchildren still hold the pipes: give them the same grace, then kill their groups.
      if (!kill_at) kill_at = Clock::now() + o.grace;
      if (Clock::now() >= *kill_at) {
        for (auto& r : ranks) ::kill(-r.pid, SIGKILL);
        sent_kill = true;
      }
    }
  }

  // Summary and exit code.
  auto rank_text = [&](int rank) { return o.nnodes > 1 ? StrCat("rank ", rank, " on node ", o.node_rank) : StrCat("rank ", rank); };
  std::vector<int> stopped, unresponsive;
  for (const auto& e : result.exits) {
    if (e.stopped_by_us && (!first_failure || e.rank != first_failure->rank)) stopped.push_back(e.rank);
    if (e.killed_by_us && e.signal == SIGKILL) unresponsive.push_back(e.rank);
  }
  std::sort(stopped.begin(), stopped.end());
  std::sort(unresponsive.begin(), unresponsive.end());
  auto list = [](const std::vector<int>& v) {
    std::vector<std::string> text;
    for (int rank : v) text.push_back(std::to_string(rank));
    return Join(text, ",");
  };
  // How they were stopped: the signal we sent last.
  std::string how = sent_kill ? " (SIGKILL)" : forwarded_signal != 0 ? StrCat(" (", SignalName(forwarded_signal), ")")
                                                                     : " (SIGTERM)";
  std::string stopped_clause = stopped.size() == 1 ? StrCat("rank ", stopped[0], " was stopped", how)
                               : stopped.empty()    ? std::string()
                                                    : StrCat("ranks ", list(stopped), " were stopped", how);
  if (!unresponsive.empty())
    stopped_clause += StrCat("; ", unresponsive.size() == 1 ? "rank " : "ranks ", list(unresponsive),
                             " ignored SIGTERM (hung?)");
  auto failure_code = [](const RankExit& e) {
    return e.signal ? 128 + e.signal : e.reported_signal ? 128 + e.reported_signal : e.exit_code;
  };
  if (remote) {
    result.exit_code = remote->exit_code != 0 ? remote->exit_code : 1;
    std::string who = remote->rank >= 0 ? StrCat("rank ", remote->rank, " on node ", remote->node) : StrCat("node ", remote->node);
    result.summary = StrCat("commkit-run: node ", o.node_rank, ": ", who, " ", remote->what, " first");
    if (first_failure) result.summary += StrCat("; here ", rank_text(first_failure->rank), " then ", Describe(*first_failure));
    result.summary += stopped.empty() ? "" : StrCat("; ", stopped_clause);
  } else if (first_failure) {
    result.exit_code = failure_code(*first_failure);
    if (early_exit && early_exit->when <= first_failure->when) {
      result.summary = StrCat("commkit-run: ", rank_text(early_exit->rank), " exited with code 0 first, ",
                              HumanSeconds(std::chrono::duration<double>(early_exit->when - start).count()),
                              " after the start, while the other ranks were still running; then ",
                              rank_text(first_failure->rank), " ", Describe(*first_failure));
    } else {
      result.summary = StrCat("commkit-run: ", rank_text(first_failure->rank), " ", Describe(*first_failure), " first");
    }
    result.summary += stopped.empty() ? "; no other rank had to be stopped" : StrCat("; ", stopped_clause);
  } else if (!stop_reason.empty()) {
    result.exit_code = forwarded_signal != 0 ? 128 + forwarded_signal : 124;
    result.summary = StrCat("commkit-run: ", stop_reason);
    if (early_exit)
      result.summary += StrCat("; ", rank_text(early_exit->rank), " had exited with code 0 ",
                               HumanSeconds(std::chrono::duration<double>(early_exit->when - start).count()),
                               " after the start while the others kept running");
    if (!stopped.empty()) result.summary += StrCat("; ", stopped_clause);
  } else {
    result.summary = StrCat("commkit-run: all ", ranks.size(), " ranks exited successfully");
  }
  if (board) {
    board->NodeDone(result.exit_code);
    // After a failure every node is stopping anyway: wait only as long as stopping takes.
    auto barrier = result.exit_code == 0 ? o.exit_barrier
                                         : std::min(o.exit_barrier, o.grace + o.kill_after + std::chrono::milliseconds(15000));
    board->WaitForNodes(barrier);
  }
  return result;
}

}  // namespace commkit::run
