#include "commkit/common/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace commkit::net {
namespace {

using std::chrono::milliseconds;

struct Pair {
  Socket a, b;
};

Pair SocketPair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {Socket(fds[0]), Socket(fds[1])};
}

// A loopback listener on an ephemeral port (IPv4 or IPv6); fd -1 when the family is not available.
Socket Listen(int family, int* port) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return s;
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(sockaddr_in);
  }
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(s.fd(), 4) != 0) return Socket();
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
  *port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return s;
}

TEST(DeadlineSocket, SendAndReceiveExactly) {
  Pair p = SocketPair();
  const std::string message(300000, 'm');  // larger than the socket buffer: partial writes
  Status sent;
  std::thread writer([&] { sent = SendAll(p.a.fd(), message, Clock::now() + std::chrono::seconds(20)); });
  std::string got(message.size(), '\0');
  Status received = RecvExact(p.b.fd(), got.data(), got.size(), Clock::now() + std::chrono::seconds(20));
  writer.join();
  EXPECT_TRUE(sent.ok()) << sent.ToString();
  EXPECT_TRUE(received.ok()) << received.ToString();
  EXPECT_EQ(got, message);
}

TEST(DeadlineSocket, ReceiveTimesOutAtTheDeadline) {
  Pair p = SocketPair();
  char c;
  const auto t0 = Clock::now();
  Status s = RecvExact(p.b.fd(), &c, 1, t0 + milliseconds(100));
  const auto waited = Clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_GE(waited, milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(10));
  // A deadline already passed fails at once, without blocking.
  EXPECT_EQ(RecvExact(p.b.fd(), &c, 1, Clock::now() - milliseconds(1)).code(), StatusCode::kTimeout);
}

TEST(DeadlineSocket, SendTimesOutWhenThePeerDoesNotRead) {
  Pair p = SocketPair();
  const std::string big(64 << 20, 'x');  // far more than any socket buffer holds
  Status s = SendAll(p.a.fd(), big, Clock::now() + milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
}

TEST(DeadlineSocket, EndOfStreamAndClosedPeer) {
  Pair p = SocketPair();
  ASSERT_TRUE(SendAll(p.a.fd(), "ab", Clock::now() + std::chrono::seconds(5)).ok());
  Socket closing = std::move(p.a);
  EXPECT_EQ(p.a.fd(), -1);
  closing = Socket();  // closes
  char buf[4];
  Status s = RecvExact(p.b.fd(), buf, 4, Clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("closed the connection"), std::string::npos) << s.message();
  // Writing to a closed peer fails instead of raising SIGPIPE.
  EXPECT_EQ(SendAll(p.b.fd(), "x", Clock::now() + std::chrono::seconds(5)).code(), StatusCode::kRemoteError);
}

TEST(DeadlineSocket, ReceiveUntilClosedIsBounded) {
  Pair p = SocketPair();
  ASSERT_TRUE(SendAll(p.a.fd(), "hello", Clock::now() + std::chrono::seconds(5)).ok());
  ::shutdown(p.a.fd(), SHUT_WR);
  auto all = RecvUntilClosed(p.b.fd(), 1 << 20, Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, "hello");

  Pair q = SocketPair();
  ASSERT_TRUE(SendAll(q.a.fd(), std::string(100, 'x'), Clock::now() + std::chrono::seconds(5)).ok());
  EXPECT_EQ(RecvUntilClosed(q.b.fd(), 10, Clock::now() + std::chrono::seconds(5)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(RecvUntilClosed(q.b.fd(), 1 << 20, Clock::now() + milliseconds(50)).status().code(), StatusCode::kTimeout);
}

TEST(DeadlineSocket, ConnectsOverIpv4AndIpv6Loopback) {
  for (int family : {AF_INET, AF_INET6}) {
    int port = 0;
    Socket listener = Listen(family, &port);
    if (listener.fd() < 0) {
      ASSERT_EQ(family, AF_INET6) << "no IPv4 loopback";
      continue;  // a host without IPv6 loopback
    }
    auto fd = ConnectWithDeadline(family == AF_INET6 ? "::1" : "127.0.0.1", port, Clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    Socket client(*fd);
    Socket server(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    ASSERT_GE(server.fd(), 0);
    ASSERT_TRUE(SendAll(client.fd(), "ping", Clock::now() + std::chrono::seconds(5)).ok());
    char buf[4];
    ASSERT_TRUE(RecvExact(server.fd(), buf, 4, Clock::now() + std::chrono::seconds(5)).ok());
    EXPECT_EQ(std::string(buf, 4), "ping");
    ASSERT_TRUE(SetBlocking(client.fd(), true).ok());
    ASSERT_TRUE(SendAll(client.fd(), "pong", Clock::now() + std::chrono::seconds(5)).ok());
    ASSERT_TRUE(RecvExact(server.fd(), buf, 4, Clock::now() + std::chrono::seconds(5)).ok());
    EXPECT_EQ(std::string(buf, 4), "pong");
  }
}

TEST(DeadlineSocket, ConnectErrorsSayWhatHappened) {
  int port = 0;
  Socket listener = Listen(AF_INET, &port);
  ASSERT_GE(listener.fd(), 0);
  listener = Socket();  // nothing listens on `port` now
  auto refused = ConnectWithDeadline("127.0.0.1", port, Clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("refused"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);

  auto unresolvable = ConnectWithDeadline("no-such-host.invalid", 80, Clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(unresolvable.ok());
  EXPECT_EQ(unresolvable.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unresolvable.status().message().find("cannot resolve"), std::string::npos);

  auto bad_port = ConnectWithDeadline("127.0.0.1", 70000, Clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(bad_port.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace commkit::net
