// TCP socket I/O bounded by a deadline: connect, send everything, receive exactly n bytes or until
// the peer closes. Used by the store clients, gpudoctor's cluster probe and the host cost profile, so
// EINTR, EAGAIN, partial writes and SIGPIPE are handled in one place.
//
// The helpers work on non-blocking sockets (they poll() until the deadline) and on blocking sockets
// with SO_RCVTIMEO/SO_SNDTIMEO (the kernel timeout returns EAGAIN, then the deadline decides).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit::net {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` (0 when passed), for poll().
int RemainingMs(Clock::time_point deadline);

// Resolves host (a name, IPv4 or IPv6 literal, without brackets) and connects to each address in
// turn (non-blocking connect + poll), TCP_NODELAY on. Returns the fd in non-blocking mode. Errors:
// Unavailable "cannot resolve '<host>'"; Timeout when the deadline passes; SystemError otherwise, each
// saying what the errno usually means ("refused (nothing listening, or a firewall REJECT rule)").
Result<int> ConnectWithDeadline(const std::string& host, int port, Clock::time_point deadline);

// Sets or clears O_NONBLOCK.
Status SetBlocking(int fd, bool blocking);

// Sends everything or fails: Timeout when the deadline passes, RemoteError when the peer is gone.
Status SendAll(int fd, std::string_view data, Clock::time_point deadline);
// Reads exactly n bytes: RemoteError "the peer closed the connection" at EOF, Timeout at the deadline.
Status RecvExact(int fd, char* out, std::size_t n, Clock::time_point deadline);
// Reads until the peer closes, at most max_bytes (DataLoss beyond).
Result<std::string> RecvUntilClosed(int fd, std::size_t max_bytes, Clock::time_point deadline);

// Closes the fd on destruction.
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  int fd() const { return fd_; }
  // Gives up ownership.
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace commkit::net
