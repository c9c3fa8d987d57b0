// TcpStoreServer's implementation class, shared by the connection/event-loop code
// (tcp_store_server.cc) and the request handlers (tcp_store_ops.cc). Private to comm/src/store.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "commkit/comm/tcp_store.h"
#include "tcp_protocol.h"

namespace commkit {

class TcpStoreServer::Impl {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Impl(TcpStoreServerOptions options) : options_(std::move(options)) {}

  ~Impl();

  Status Listen();

  int port() const { return port_; }
  const std::string& host() const { return options_.host; }

  TcpStoreServer::Stats stats() const;

 private:
  struct Pending {
    tcp_store::Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  struct Conn {
    bool greeted = false;
    bool closing = false;  // close once the output buffer drains
    bool read_paused = false;  // by the memory cap, not the client's doing
    Clock::time_point paused_at;
    Clock::time_point opened;
    Clock::time_point last_rx;        // last byte received
    Clock::time_point last_activity;  // last byte received or reply queued
    std::string in;
    std::string out;
    std::optional<Pending> pending;
  };

  void AddFd(int fd, std::uint32_t events);
  void ModFd(int fd, std::uint32_t events);
  template <typename F>
  void Count(F f) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    f(stats_);
  }

  void Loop();

  int NextTimeoutMs() const;

  void Accept();

  void Close(int fd);

  // Reads what is available and processes complete frames. Returns false to close the connection.
  bool OnReadable(int fd, Conn& conn);

  bool ProtocolError(int fd, Conn& conn, std::string_view why);

  bool Process(int fd, Conn& conn);

  void Send(int fd, Conn& conn, std::string_view bytes);

  void Flush(int fd, Conn& conn);

  void ReplyOk(int fd, Conn& conn, std::string_view body);
  void ReplyError(int fd, Conn& conn, StatusCode code, std::string_view message);

  static constexpr std::size_t kKey = TcpStoreLimits::kMaxKeyBytes;
  static constexpr std::size_t kValue = TcpStoreLimits::kMaxValueBytes;
  static constexpr std::size_t kKeys = TcpStoreLimits::kMaxKeysPerRequest;

  bool Handle(int fd, Conn& conn, const std::string& frame);

  // Completes the parked request when all its keys exist. Returns whether it completed.
  bool TryComplete(int fd, Conn& conn);

  void Watch(int fd, const std::vector<std::string>& keys);
  void Unwatch(int fd, const std::vector<std::string>& keys);

  void Notify(const std::string& key);

  void Expire();
  // Enforces the memory cap and the frame/idle timeouts (once per loop iteration).
  void EnforceLimits(Clock::time_point now, std::vector<int>& to_close);
  std::uint32_t Events(const Conn& conn) const;

  TcpStoreServerOptions options_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_{};
  std::unordered_map<int, Conn> conns_;
  std::map<std::string, std::string, std::less<>> data_;
  std::unordered_map<std::string, std::set<int>> watchers_;
  std::size_t pending_bytes_ = 0;  // sum of conns_' input buffers (recounted every iteration)
  // While the cap is reached, one paused connection at a time (the longest paused) may read past it,
  // so its request completes or stalls (and is dropped): paused connections can never hold the
  // memory among themselves for ever. Peak: cap + one frame + 64 KiB per connection.
  int privileged_fd_ = -1;
  mutable std::mutex stats_mu_;
  TcpStoreServer::Stats stats_;
};

}  // namespace commkit
