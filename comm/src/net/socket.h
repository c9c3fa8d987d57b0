// Blocking-with-deadline socket helpers shared by the store clients (private to commkit::comm).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit::net {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` (0 when passed), for poll().
int RemainingMs(Clock::time_point deadline);

// Resolves host and connects (non-blocking connect + poll), TCP_NODELAY on. Returns the fd (blocking
// mode off: use the helpers below). Unavailable "cannot resolve" / SystemError "connect: ..." errors.
Result<int> ConnectWithDeadline(const std::string& host, int port, Clock::time_point deadline);

// Sends everything or fails: Timeout when the deadline passes, RemoteError when the peer is gone.
Status SendAll(int fd, std::string_view data, Clock::time_point deadline);
// Reads exactly n bytes: RemoteError "the server closed the connection" at EOF.
Status RecvExact(int fd, char* out, std::size_t n, Clock::time_point deadline);
// Reads until the peer closes, at most max_bytes.
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

 private:
  int fd_;
};

}  // namespace commkit::net
