#include "net/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "commkit/common/strings.h"

namespace commkit::net {

int RemainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

namespace {

Status PollFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    struct pollfd p {fd, events, 0};
    int rc = ::poll(&p, 1, RemainingMs(deadline));
    if (rc > 0) return Status::Ok();
    if (rc == 0) return Status::Timeout("no answer in time");
    if (errno != EINTR) return Status::FromErrno(errno, "poll");
  }
}

}  // namespace

Result<int> ConnectWithDeadline(const std::string& host, int port, Clock::time_point deadline) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0) return Status::Unavailable(StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  Status last = Status::Unavailable("no address");
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int crc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (crc != 0 && errno == EINPROGRESS) {
      struct pollfd p {fd, POLLOUT, 0};
      int prc = ::poll(&p, 1, RemainingMs(deadline));
      int err = 0;
      socklen_t len = sizeof(err);
      if (prc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      else err = ETIMEDOUT;
      crc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (crc == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(res);
      return fd;
    }
    last = Status::FromErrno(errno, "connect");
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

Status SendAll(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      COMMKIT_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline));
      continue;
    }
    return Status::RemoteError(StrCat("send failed: ", std::strerror(errno), " (server gone?)"));
  }
  return Status::Ok();
}

Status RecvExact(int fd, char* out, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t r = ::recv(fd, out, n, 0);
    if (r > 0) {
      out += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return Status::RemoteError("the server closed the connection (did the store's process exit?)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      COMMKIT_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline));
      continue;
    }
    return Status::RemoteError(StrCat("recv failed: ", std::strerror(errno)));
  }
  return Status::Ok();
}

Result<std::string> RecvUntilClosed(int fd, std::size_t max_bytes, Clock::time_point deadline) {
  std::string out;
  char buf[16384];
  while (true) {
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r > 0) {
      out.append(buf, static_cast<std::size_t>(r));
      if (out.size() > max_bytes) return Status::DataLoss(StrCat("reply larger than ", HumanBytes(max_bytes)));
      continue;
    }
    if (r == 0) return out;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      COMMKIT_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline));
      continue;
    }
    return Status::RemoteError(StrCat("recv failed: ", std::strerror(errno)));
  }
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace commkit::net
