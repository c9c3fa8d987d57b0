// TcpStoreServer: one epoll thread owning every connection and the key-value map. Blocking requests
// (get, wait, multi_get) are parked per connection and completed when their keys arrive or their
// deadline passes; nothing busy-polls.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "commkit/comm/tcp_store.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "tcp_protocol.h"
#include "tcp_store_server_impl.h"

namespace commkit {

using namespace tcp_store;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr std::size_t kReadChunk = 64 << 10;

void RaiseFileLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

std::string HandshakeReply(StatusCode code, std::string_view message) {
  Writer w;
  w.U8(static_cast<std::uint8_t>(code));
  w.Str(message);
  return std::move(w.data());
}

}  // namespace

TcpStoreServer::Impl::~Impl() {
  stop_.store(true);
  if (wake_fd_ >= 0) {
    std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, conn] : conns_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status TcpStoreServer::Impl::Listen() {
  RaiseFileLimit();
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  std::string port = std::to_string(options_.port);
  const char* host = options_.host.empty() ? nullptr : options_.host.c_str();
  int rc = ::getaddrinfo(host, port.c_str(), &hints, &res);
  if (rc != 0)
    return Status::InvalidArgument(StrCat("tcp store server: cannot resolve bind address '", options_.host, "': ",
                                          ::gai_strerror(rc)));
  Status last = Status::Unavailable("no address");
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = Status::FromErrno(errno, "socket");
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      int zero = 0;  // "::" accepts IPv4 too
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, options_.backlog) != 0) {
      int err = errno;
      ::close(fd);
      last = err == EADDRINUSE
                 ? Status::Unavailable(StrCat("tcp store server: ", options_.host, ":", options_.port,
                                              " is already in use (another job's store? pick another MASTER_PORT)"))
                 : Status::FromErrno(err, StrCat("tcp store server: bind/listen ", options_.host, ":", options_.port));
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return last;
  struct sockaddr_storage addr {};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Status::FromErrno(errno, "tcp store server: epoll/eventfd");
  AddFd(listen_fd_, EPOLLIN);
  AddFd(wake_fd_, EPOLLIN);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

TcpStoreServer::Stats TcpStoreServer::Impl::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void TcpStoreServer::Impl::AddFd(int fd, std::uint32_t events) {
  struct epoll_event ev {};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void TcpStoreServer::Impl::ModFd(int fd, std::uint32_t events) {
  struct epoll_event ev {};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}


void TcpStoreServer::Impl::Loop() {
  std::vector<struct epoll_event> events(256);
  while (!stop_.load()) {
    int timeout_ms = NextTimeoutMs();
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      COMMKIT_LOG_ERROR("tcp store server: epoll_wait failed: ", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        std::uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
        continue;
      }
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      if (events[i].events & (EPOLLERR | EPOLLHUP)) {
        Close(fd);
        continue;
      }
      if (events[i].events & EPOLLIN) {
        if (!OnReadable(fd, it->second)) {
          Close(fd);
          continue;
        }
      }
      if (events[i].events & EPOLLOUT) {
        Flush(fd, it->second);
        // Replies drained: serve the requests held back by backpressure.
        if (it->second.out.empty() && !it->second.pending && !it->second.closing && !it->second.in.empty() &&
            !Process(fd, it->second))
          it->second.closing = true;
      }
    }
    Expire();
    if (accept_paused_ && Clock::now() >= accept_resume_) {
      accept_paused_ = false;
      ModFd(listen_fd_, EPOLLIN);
    }
  }
}

int TcpStoreServer::Impl::NextTimeoutMs() const {
  auto now = Clock::now();
  auto next = now + std::chrono::milliseconds(1000);
  for (const auto& [fd, conn] : conns_) {
    if (conn.pending) next = std::min(next, conn.pending->deadline);
    if (!conn.greeted) next = std::min(next, conn.opened + kHandshakeTimeout);
  }
  if (accept_paused_) next = std::min(next, accept_resume_);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 1000));
}

void TcpStoreServer::Impl::Accept() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        COMMKIT_LOG_WARN("tcp store server: out of file descriptors with ", conns_.size(),
                         " clients; raise `ulimit -n`. Pausing accept for 100 ms");
        accept_paused_ = true;
        accept_resume_ = Clock::now() + std::chrono::milliseconds(100);
        ModFd(listen_fd_, 0);
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn conn;
    conn.opened = conn.last_rx = conn.last_activity = Clock::now();
    conns_.emplace(fd, std::move(conn));
    AddFd(fd, EPOLLIN);
    Count([&](Stats& s) {
      ++s.connections_accepted;
      s.connections_open = static_cast<std::int64_t>(conns_.size());
    });
  }
}

void TcpStoreServer::Impl::Close(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (fd == privileged_fd_) privileged_fd_ = -1;
  if (it->second.pending) Unwatch(fd, it->second.pending->keys);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(it);
  Count([&](Stats& s) { s.connections_open = static_cast<std::int64_t>(conns_.size()); });
}

bool TcpStoreServer::Impl::OnReadable(int fd, Conn& conn) {
  char buf[kReadChunk];
  bool eof = false;
  while (true) {
    // Admission: a buffer may always grow to 64 KiB; beyond that, only within the
    // connection's and the server's caps. Otherwise stop reading: the kernel's socket buffer and
    // then TCP flow control hold the client back until memory is released.
    std::size_t conn_room = options_.max_connection_pending_bytes + 16 > conn.in.size()
                                ? options_.max_connection_pending_bytes + 16 - conn.in.size()
                                : 0;
    std::size_t total_room = fd == privileged_fd_ ? kReadChunk
                             : options_.max_pending_bytes > pending_bytes_ ? options_.max_pending_bytes - pending_bytes_
                                                                           : 0;
    std::size_t always = conn.in.size() < kReadChunk ? kReadChunk - conn.in.size() : 0;
    std::size_t room = std::min({kReadChunk, conn_room, std::max(total_room, always)});
    if (room == 0) {
      if (conn.in.size() > options_.max_connection_pending_bytes) break;  // the frame check below rejects it
      conn.read_paused = true;
      conn.paused_at = Clock::now();
      ModFd(fd, Events(conn));
      Count([](Stats& s) { ++s.reads_paused; });
      break;
    }
    ssize_t n = ::recv(fd, buf, room, 0);
    if (n > 0) {
      conn.in.append(buf, static_cast<std::size_t>(n));
      pending_bytes_ += static_cast<std::size_t>(n);
      conn.last_rx = conn.last_activity = Clock::now();
      continue;
    }
    if (n == 0) {
      eof = true;  // handle what arrived before the peer closed, then close
      break;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == EINTR) continue;
    return false;
  }
  if (conn.closing) return !eof;
  std::size_t before = conn.in.size();
  bool keep = Process(fd, conn);
  pending_bytes_ -= std::min(pending_bytes_, before - std::min(before, conn.in.size()));
  // Clients send one request at a time, so after processing at most one partial frame remains. More
  // means bytes streamed behind a parked wait or unread replies: bound the buffer, don't grow it.
  if (keep && conn.in.size() > std::min(kMaxFrameBytes, options_.max_connection_pending_bytes) + 4)
    return ProtocolError(fd, conn, StrCat(conn.in.size(), " bytes sent behind a parked request or unread replies"));
  return keep && !eof;
}

std::uint32_t TcpStoreServer::Impl::Events(const Conn& conn) const {
  return (conn.read_paused ? 0u : static_cast<std::uint32_t>(EPOLLIN)) | (conn.out.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
}

void TcpStoreServer::Impl::EnforceLimits(Clock::time_point now, std::vector<int>& to_close) {
  std::size_t total = 0;
  for (auto& [fd, conn] : conns_) total += conn.in.size();
  pending_bytes_ = total;
  if (privileged_fd_ >= 0) {
    auto it = conns_.find(privileged_fd_);
    if (it == conns_.end() || it->second.in.empty()) privileged_fd_ = -1;
  }
  if (privileged_fd_ < 0 && pending_bytes_ >= options_.max_pending_bytes) {
    int oldest = -1;
    Conn* oldest_conn = nullptr;
    for (auto& [fd, conn] : conns_) {
      if (!conn.read_paused || conn.closing) continue;
      if (oldest_conn == nullptr || conn.paused_at < oldest_conn->paused_at) {
        oldest = fd;
        oldest_conn = &conn;
      }
    }
    if (oldest_conn != nullptr) {
      privileged_fd_ = oldest;
      oldest_conn->read_paused = false;
      oldest_conn->last_rx = now;
      ModFd(oldest, Events(*oldest_conn));
    }
  }
  for (auto& [fd, conn] : conns_) {
    if (conn.closing || !conn.greeted) continue;
    if (conn.read_paused) {
      // Resume once there is room again; the wait was not the client's doing.
      if (pending_bytes_ < options_.max_pending_bytes) {
        conn.read_paused = false;
        conn.last_rx = now;
        ModFd(fd, Events(conn));
      }
      continue;
    }
    if (!conn.in.empty() && now - conn.last_rx > options_.frame_timeout) {
      COMMKIT_LOG_WARN("tcp store server: closing connection (fd ", fd, "): a ", conn.in.size(),
                       "-byte partial request received nothing for ",
                       HumanSeconds(std::chrono::duration<double>(options_.frame_timeout).count()));
      Count([](Stats& s) { ++s.closed_stalled; });
      to_close.push_back(fd);
      continue;
    }
    if (options_.idle_timeout.count() > 0 && conn.in.empty() && conn.out.empty() && !conn.pending &&
        now - conn.last_activity > options_.idle_timeout) {
      Count([](Stats& s) { ++s.closed_idle; });
      to_close.push_back(fd);
    }
  }
  Count([&](Stats& s) {
    s.pending_bytes = static_cast<std::int64_t>(pending_bytes_);
    s.peak_pending_bytes = std::max(s.peak_pending_bytes, s.pending_bytes);
  });
}

bool TcpStoreServer::Impl::ProtocolError(int fd, Conn& conn, std::string_view why) {
  Count([](Stats& s) { ++s.protocol_errors; });
  COMMKIT_LOG_WARN("tcp store server: closing connection (fd ", fd, "): ", why);
  (void)conn;
  return false;
}

bool TcpStoreServer::Impl::Process(int fd, Conn& conn) {
  if (!conn.greeted) {
    if (conn.in.size() < 4) return true;
    if (std::memcmp(conn.in.data(), kMagic, 4) != 0) {
      Count([](Stats& s) { ++s.rejected_handshakes; });
      // A stray client (HTTP, a port scanner, another store protocol): say what this port is.
      Send(fd, conn, "commkit tcp store: this port serves the commkit store protocol; closing\n");
      conn.closing = true;
      return true;
    }
    if (conn.in.size() < kHelloFixedBytes) return true;
    Reader r(std::string_view(conn.in).substr(4));
    std::uint16_t version = *r.U16();
    (void)r.U16();
    std::uint32_t token_len = *r.U32();
    if (token_len > TcpStoreLimits::kMaxTokenBytes) return ProtocolError(fd, conn, "oversized token in handshake");
    if (conn.in.size() < kHelloFixedBytes + token_len) return true;
    std::string token = conn.in.substr(kHelloFixedBytes, token_len);
    conn.in.erase(0, kHelloFixedBytes + token_len);
    if (version != kVersion) {
      Count([](Stats& s) { ++s.rejected_handshakes; });
      Send(fd, conn, HandshakeReply(StatusCode::kNotSupported,
                                    StrCat("protocol version ", version, " is not supported (server speaks ",
                                           kVersion, "); use the same commkit version on every rank")));
      conn.closing = true;
      return true;
    }
    if (token != options_.token) {
      Count([](Stats& s) { ++s.rejected_handshakes; });
      Send(fd, conn, HandshakeReply(StatusCode::kPermissionDenied,
                                    "wrong job token (COMMKIT_STORE_TOKEN or the launcher's job id differs from the "
                                    "server's): this client belongs to another job"));
      conn.closing = true;
      return true;
    }
    conn.greeted = true;
    Send(fd, conn, HandshakeReply(StatusCode::kOk, "ok"));
  }
  // Backpressure: a client that sends requests without reading the replies stops being served once
  // one frame's worth of replies is queued; its unread requests then hit the input bound below.
  while (!conn.pending && !conn.closing && conn.out.size() <= kMaxFrameBytes && conn.in.size() >= 4) {
    std::uint32_t len;
    std::memcpy(&len, conn.in.data(), 4);
    if (len == 0 || len > kMaxFrameBytes) return ProtocolError(fd, conn, StrCat("bad frame length ", len));
    if (len + std::size_t{4} > options_.max_connection_pending_bytes)
      return ProtocolError(fd, conn, StrCat("a ", len, "-byte request exceeds this server's per-connection limit of ",
                                            options_.max_connection_pending_bytes, " bytes"));
    if (conn.in.size() < 4 + static_cast<std::size_t>(len)) return true;
    std::string frame = conn.in.substr(4, len);
    conn.in.erase(0, 4 + static_cast<std::size_t>(len));
    if (!Handle(fd, conn, frame)) return false;
  }
  return true;
}

void TcpStoreServer::Impl::Send(int fd, Conn& conn, std::string_view bytes) {
  conn.out.append(bytes.data(), bytes.size());
  conn.last_activity = Clock::now();
  Flush(fd, conn);
}

void TcpStoreServer::Impl::Flush(int fd, Conn& conn) {
  while (!conn.out.empty()) {
    ssize_t n = ::send(fd, conn.out.data(), conn.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      conn.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ModFd(fd, Events(conn));
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    conn.closing = true;
    conn.out.clear();
    break;
  }
  ModFd(fd, Events(conn));
  if (conn.closing) {
    // Deferred: the event loop must not erase the connection under the caller's feet.
    ::shutdown(fd, SHUT_RDWR);
  }
}

void TcpStoreServer::Impl::ReplyOk(int fd, Conn& conn, std::string_view body) {
  Send(fd, conn, Frame(static_cast<std::uint8_t>(StatusCode::kOk), body));
}

void TcpStoreServer::Impl::ReplyError(int fd, Conn& conn, StatusCode code, std::string_view message) {
  Writer w;
  w.Str(message);
  Send(fd, conn, Frame(static_cast<std::uint8_t>(code), w.data()));
}

void TcpStoreServer::Impl::Expire() {
  auto now = Clock::now();
  std::vector<int> to_close;
  for (auto& [fd, conn] : conns_) {
    if (conn.closing && conn.out.empty()) {
      to_close.push_back(fd);
      continue;
    }
    if (!conn.greeted && now - conn.opened > kHandshakeTimeout) {
      to_close.push_back(fd);
      continue;
    }
    if (conn.pending && now >= conn.pending->deadline) {
      std::vector<std::string> missing;
      for (const auto& k : conn.pending->keys)
        if (data_.find(k) == data_.end()) missing.push_back(k);
      Unwatch(fd, conn.pending->keys);
      conn.pending.reset();
      Writer w;
      w.List(missing);
      Send(fd, conn, Frame(static_cast<std::uint8_t>(StatusCode::kTimeout), w.data()));
      if (!Process(fd, conn)) conn.closing = true;
    }
  }
  EnforceLimits(now, to_close);
  std::sort(to_close.begin(), to_close.end());
  to_close.erase(std::unique(to_close.begin(), to_close.end()), to_close.end());
  for (int fd : to_close) Close(fd);
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  if (options.port < 0 || options.port > 65535)
    return Status::InvalidArgument(StrCat("tcp store server: port ", options.port, " is outside 0-65535"));
  if (options.token.size() > TcpStoreLimits::kMaxTokenBytes)
    return Status::InvalidArgument("tcp store server: token longer than 4 KiB");
  auto impl = std::make_unique<Impl>(options);
  COMMKIT_RETURN_IF_ERROR(impl->Listen());
  COMMKIT_LOG_INFO("tcp store server listening on ", options.host, ":", impl->port());
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port(); }
const std::string& TcpStoreServer::host() const { return impl_->host(); }
TcpStoreServer::Stats TcpStoreServer::stats() const { return impl_->stats(); }

}  // namespace commkit
