#include "launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
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
  bool exited = false;
};

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
bool Pump(int& fd, std::string& partial, int out_fd, const std::string& prefix, bool use_prefix) {
  char buf[16384];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
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
std::vector<std::string> ChildEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view key = entry.substr(0, entry.find('='));
    bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& kv) { return kv.first == key; });
    if (!replaced) out.emplace_back(entry);
  }
  for (const auto& [key, value] : overrides)
    if (!value.empty()) out.push_back(StrCat(key, "=", value));
  return out;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? StrCat("SIG", abbrev) : StrCat("signal ", sig);
}

std::string Describe(const RankExit& e) {
  if (e.signal) return StrCat("was killed by signal ", e.signal, " (", SignalName(e.signal), ": ", strsignal(e.signal), ")");
  return StrCat("exited with code ", e.exit_code);
}

}  // namespace

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
  // failure reports keep working when rank 0 dies.
  std::unique_ptr<TcpStoreServer> server;
  int port = o.master_port;
  if (o.host_store && o.node_rank == 0) {
    TcpStoreServerOptions so;
    so.host = o.nnodes > 1 ? "0.0.0.0" : "127.0.0.1";
    so.port = o.master_port;
    so.token = token;
    COMMKIT_ASSIGN_OR_RETURN(server, TcpStoreServer::Start(so));
    port = server->port();
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
        {"COMMKIT_STORE_HOSTED", server ? "1" : ""},
    });
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
  std::optional<RankExit> first_failure;
  std::optional<Clock::time_point> term_at, kill_at;
  bool sent_term = false, sent_kill = false;
  int forwarded_signal = 0;
  std::string stop_reason;
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
        if (owners[k].second) Pump(r.err_fd, r.err_partial, STDERR_FILENO, prefix, o.prefix);
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
      RankExit e;
      e.rank = r.rank;
      e.when = Clock::now();
      e.stopped_by_us = sent_term || sent_kill;
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      result.exits.push_back(e);
      bool failed = e.signal != 0 || e.exit_code != 0;
      if (failed && !first_failure && !e.stopped_by_us) {
        first_failure = e;
        term_at = Clock::now() + o.grace;
      }
    }
    auto now = Clock::now();
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
  std::vector<int> stopped;
  for (const auto& e : result.exits)
    if (e.stopped_by_us && (!first_failure || e.rank != first_failure->rank)) stopped.push_back(e.rank);
  std::sort(stopped.begin(), stopped.end());
  std::vector<std::string> stopped_text;
  for (int rank : stopped) stopped_text.push_back(std::to_string(rank));
  // How they were stopped: the signal we sent last.
  std::string how = sent_kill ? " (SIGKILL)" : forwarded_signal != 0 ? StrCat(" (", SignalName(forwarded_signal), ")")
                                                                     : " (SIGTERM)";
  std::string stopped_clause = stopped.size() == 1 ? StrCat("rank ", stopped_text[0], " was stopped", how)
                               : stopped.empty()    ? std::string()
                                                    : StrCat("ranks ", Join(stopped_text, ","), " were stopped", how);
  if (first_failure) {
    result.exit_code = first_failure->signal ? 128 + first_failure->signal : first_failure->exit_code;
    result.summary = StrCat("commkit-run: rank ", first_failure->rank, " ", Describe(*first_failure), " first");
    result.summary += stopped.empty() ? "; no other rank had to be stopped" : StrCat("; ", stopped_clause);
  } else if (!stop_reason.empty()) {
    result.exit_code = forwarded_signal != 0 ? 128 + forwarded_signal : 124;
    result.summary = StrCat("commkit-run: ", stop_reason);
    if (!stopped.empty()) result.summary += StrCat("; ", stopped_clause);
  } else {
    result.summary = StrCat("commkit-run: all ", ranks.size(), " ranks exited successfully");
  }
  return result;
}

}  // namespace commkit::run
