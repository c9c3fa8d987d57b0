#include "commkit/common/socket.h"

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

#include "commkit/common/host_port.h"
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

// What a failed connect usually means, for the person reading the error.
Status ConnectError(int err, const std::string& host, int port) {
  const std::string where = StrCat("connect to ", FormatHostPort(host, port), ": ");
  switch (err) {
    case ETIMEDOUT:
      return Status::Timeout(StrCat(where, "timeout (no answer: packets dropped by a firewall DROP rule, a wrong route, "
                                           "or the host is down)"));
    case ECONNREFUSED:
      return Status::SystemError(StrCat(where, "refused (nothing listening, or a firewall REJECT rule; errno ", err, ")"));
    case ENETUNREACH:
    case EHOSTUNREACH:
      return Status::SystemError(StrCat(where, "no route (", std::strerror(err), "; errno ", err, ")"));
    default:
      return Status::FromErrno(err, StrCat(where, "connect"));
  }
}

}  // namespace

Result<int> ConnectWithDeadline(const std::string& host, int port, Clock::time_point deadline) {
  if (port < 1 || port > 65535) return Status::InvalidArgument(StrCat("connect to '", host, "': port ", port, " is not in 1-65535"));
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0) return Status::Unavailable(StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  Status last = Status::Unavailable(StrCat("cannot resolve '", host, "': no address"));
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = Status::FromErrno(errno, "socket");
      continue;
    }
    int crc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    int err = crc == 0 ? 0 : errno;
    if (crc != 0 && err == EINPROGRESS) {
      err = PollFor(fd, POLLOUT, deadline).ok() ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (err == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(res);
      return fd;
    }
    last = ConnectError(err, host, port);
    ::close(fd);
    if (err == ETIMEDOUT) break;  // the deadline is spent: the other addresses would time out at once
  }
  ::freeaddrinfo(res);
  return last;
}

Status SetBlocking(int fd, bool blocking) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return Status::FromErrno(errno, "fcntl(F_GETFL)");
  flags = blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK;
  if (::fcntl(fd, F_SETFL, flags) != 0) return Status::FromErrno(errno, "fcntl(F_SETFL)");
  return Status::Ok();
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
    return Status::RemoteError(StrCat("send failed: ", std::strerror(errno), " (has the peer exited?)"));
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
    if (r == 0) return Status::RemoteError("the peer closed the connection (did its process exit?)");
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
