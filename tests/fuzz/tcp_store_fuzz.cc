// libFuzzer target for the TcpStore server's handshake and frame handling, over real loopback
// sockets against one long-lived in-process TcpStoreServer, plus the bounds-checked codec (Reader).
//
// Input layout: byte 0 selects the mode: even = the rest is sent raw (handshake fuzzing); odd = a
// valid handshake with the server's token is sent first, then the rest (request fuzzing). The fuzzer
// then half-closes the connection and reads until the server closes it: the server must close within
// a bound (no hang), never crash, and keep answering a well-behaved client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "commkit/comm/tcp_store.h"
#include "tcp_protocol.h"

namespace {

using namespace commkit;
constexpr char kToken[] = "fuzz-token";

struct Fixture {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> client;
  std::uint64_t runs = 0;
};

Fixture& GetFixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    TcpStoreServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.token = kToken;
    auto server = TcpStoreServer::Start(so);
    if (!server.ok()) {
      std::fprintf(stderr, "cannot start server: %s\n", server.status().ToString().c_str());
      std::abort();
    }
    fx->server = std::move(server).value();
    TcpStoreOptions co;
    co.host = "127.0.0.1";
    co.port = fx->server->port();
    co.token = kToken;
    auto client = TcpStore::Create(co);
    if (!client.ok()) std::abort();
    fx->client = std::move(client).value();
    return fx;
  }();
  return *f;
}

void FuzzCodec(std::string_view data) {
  tcp_store::Reader r(data);
  while (!r.empty()) {
    auto tag = r.U8();
    if (!tag) break;
    bool ok = true;
    switch (*tag % 4) {
      case 0: ok = r.Str(TcpStoreLimits::kMaxKeyBytes).has_value(); break;
      case 1: ok = r.List(64, 1024).has_value(); break;
      case 2: ok = r.U64().has_value(); break;
      default: ok = r.U32().has_value(); break;
    }
    if (!ok) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzCodec(input.substr(1));
  Fixture& fx = GetFixture();

  std::string bytes;
  if (data[0] & 1) {
    tcp_store::Writer hello;
    hello.data().append(tcp_store::kMagic, 4);
    hello.U16(tcp_store::kVersion);
    hello.U16(0);
    hello.U32(sizeof(kToken) - 1);
    hello.data().append(kToken);
    bytes = std::move(hello.data());
  }
  bytes.append(input.substr(1));

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(fx.server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "connect to the store server failed\n");
    std::abort();
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed the connection (a rejected frame): fine
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == ECONNRESET) break;
      std::fprintf(stderr, "server did not close a half-closed connection within 10 s (errno %d)\n", errno);
      std::abort();
    }
  }
  ::close(fd);

  // The server must keep serving well-behaved clients.
  if (++fx.runs % 64 == 0) {
    auto value = fx.client->Add("__fuzz_alive", 1);
    if (!value.ok()) {
      std::fprintf(stderr, "server stopped answering: %s\n", value.status().ToString().c_str());
      std::abort();
    }
  }
  return 0;
}
