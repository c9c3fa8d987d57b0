// TcpStore: the default rendezvous store. A server (TcpStoreServer: epoll, one thread, embedded in
// rank 0 or run standalone by `commkit-store serve`) and a client (TcpStore, a Store).
//
// Protocol (docs/store-protocol.md): a versioned binary protocol; every connection opens with a
// handshake carrying a magic, the protocol version and the job token, so a foreign client (another
// job, a port scanner, an HTTP request) is rejected before it can read or write anything. Frames are
// length-prefixed and bounded (kMaxKeyBytes, kMaxValueBytes, kMaxKeysPerRequest); malformed input
// closes that one connection and leaves every other client's data and waits intact.
// Whole requests and replies are bounded by the 65 MiB frame limit too: the client refuses larger
// requests and a multi_get whose values exceed it gets kInvalidArgument ("fetch fewer keys"). A client
// that pipelines without reading replies is throttled (at most one frame of queued replies) and is
// disconnected when it queues more than one frame of input behind a parked request or unread replies.
// Memory held for partial frames is capped per connection and in total, and stalled partial frames and
// idle connections are timed out (TcpStoreServerOptions), so authenticated but hostile clients cannot
// hold the server's memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commkit/comm/store.h"

namespace commkit {

struct TcpStoreLimits {
  static constexpr std::size_t kMaxKeyBytes = 8 << 10;
  static constexpr std::size_t kMaxValueBytes = 64 << 20;
  static constexpr std::size_t kMaxKeysPerRequest = 128 << 10;
  static constexpr std::size_t kMaxTokenBytes = 4 << 10;
};

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind ("0.0.0.0", "::", "127.0.0.1", an interface address)
  int port = 29500;              // 0 = any free port (see TcpStoreServer::port())
  std::string token;             // job token clients must present ("" = no token required)
  int backlog = 16384;           // listen queue (capped by net.core.somaxconn)
  // Memory held for requests still arriving (partial frames) across all connections. Reading pauses
  // while it is exceeded, so a client's big value waits instead of failing; a connection whose
  // buffer is under 64 KiB may always read, so small requests (rendezvous) are never held up. Peak
  // memory: max_pending_bytes + 64 KiB per connection.
  std::size_t max_pending_bytes = std::size_t{256} << 20;
  // One connection's buffered request bytes; a request frame larger than this is refused (the
  // connection is closed). The default admits the largest frame the protocol allows.
  std::size_t max_connection_pending_bytes = (std::size_t{65} << 20) + 4;
  // A request that stops arriving part-way (no byte for this long while a frame is incomplete) is
  // dropped with its connection and its memory freed.
  std::chrono::milliseconds frame_timeout = std::chrono::seconds(30);
  // An authenticated connection with nothing in flight for this long is closed (0 = never). Clients
  // check pooled connections before use and reconnect, so nothing is lost.
  std::chrono::milliseconds idle_timeout = std::chrono::minutes(15);
};

class TcpStoreServer {
 public:
  // Binds, listens and starts the server thread. Unavailable when the address is in use.
  static Result<std::unique_ptr<TcpStoreServer>> Start(const TcpStoreServerOptions& options);
  ~TcpStoreServer();  // stops the thread, closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  const std::string& host() const;
  // Counters for tests and `commkit-store serve --stats`.
  struct Stats {
    std::int64_t connections_accepted = 0;
    std::int64_t connections_open = 0;
    std::int64_t rejected_handshakes = 0;
    std::int64_t protocol_errors = 0;
    std::int64_t requests = 0;
    std::int64_t keys = 0;
    std::int64_t pending_bytes = 0;       // request bytes buffered now (partial frames)
    std::int64_t peak_pending_bytes = 0;
    std::int64_t reads_paused = 0;        // times a connection's reading paused at max_pending_bytes
    std::int64_t closed_stalled = 0;      // frame_timeout
    std::int64_t closed_idle = 0;         // idle_timeout
  };
  Stats stats() const;

  class Impl;

 private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // server address (name or IP)
  int port = 29500;
  std::string token;               // presented in the handshake; must match the server's
  // Start a server in this process before connecting (rank 0). With port 0 the server picks a port.
  bool is_server = false;
  std::string bind_host = "0.0.0.0";  // for is_server
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;        // default for blocking calls
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(60);  // retries with backoff until then
  int max_connections = 8;  // connection pool size: concurrent calls from several threads
  // Bound on the handshake once connected. Rendezvous probes use a short one: a server of another
  // protocol on the port (torchrun's TCPStore) may never answer a commkit hello.
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(30);
};

class TcpStore final : public Store {
 public:
  static Result<std::unique_ptr<TcpStore>> Create(const TcpStoreOptions& options);
  ~TcpStore() override;

  std::string Describe() const override;
  int port() const { return options_.port; }
  // The embedded server, when is_server was set (nullptr otherwise).
  TcpStoreServer* server() const { return server_.get(); }

  Status Set(std::string_view key, std::string_view value) override;
  using Store::Get;
  Result<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::int64_t> Add(std::string_view key, std::int64_t delta) override;
  Result<std::string> CompareSet(std::string_view key, std::string_view expected, std::string_view desired) override;
  Result<bool> Check(const std::vector<std::string>& keys) override;
  using Store::Wait;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Delete(std::string_view key) override;
  Result<std::int64_t> NumKeys() override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  // Round trip to the server (health check).
  Status Ping();

  class Connection;

 private:
  explicit TcpStore(TcpStoreOptions options);
  // Sends one request and reads its reply on a pooled connection. `wait` bounds how long the server
  // may hold the reply (blocking ops); the socket deadline adds a margin for the network.
  Result<std::string> Call(std::uint8_t op, const std::string& payload, std::chrono::milliseconds wait);

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace commkit
