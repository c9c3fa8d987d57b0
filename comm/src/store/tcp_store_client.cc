// TcpStore client: a small pool of blocking connections (one request in flight per connection), so
// several threads can block in Get/Wait at once. Every socket operation has a deadline.

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "commkit/comm/tcp_store.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "commkit/common/socket.h"
#include "tcp_protocol.h"

namespace commkit {

using namespace tcp_store;
using Clock = net::Clock;

namespace {

// Extra time the socket waits beyond a blocking call's own timeout, for the server's reply to travel.
constexpr auto kReplyMargin = std::chrono::seconds(10);
// Deadline for non-blocking calls (set, add, ...): a server that does not answer in this time is gone.
constexpr auto kShortCallTimeout = std::chrono::seconds(60);

}  // namespace

class TcpStore::Connection {
 public:
  explicit Connection(int fd) : socket_(fd) {}
  // False when the server closed this pooled connection while it sat idle (the server drops idle
  // connections after its idle timeout): a reply is never pending on an idle connection, so any
  // readable byte or hang-up means it is gone and the call must use a fresh one.
  bool StillOpen() const {
    struct pollfd p {};
    p.fd = socket_.fd();
    p.events = POLLIN | POLLRDHUP;
    return ::poll(&p, 1, 0) == 0;
  }
  Status SendAll(std::string_view data, Clock::time_point deadline) { return net::SendAll(socket_.fd(), data, deadline); }
  Status RecvExact(char* out, std::size_t n, Clock::time_point deadline) {
    return net::RecvExact(socket_.fd(), out, n, deadline);
  }

 private:
  net::Socket socket_;
};

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) { timeout_ = options_.timeout; }
TcpStore::~TcpStore() = default;

std::string TcpStore::Describe() const { return StrCat("tcp store ", options_.host, ":", options_.port); }

Result<std::unique_ptr<TcpStore>> TcpStore::Create(const TcpStoreOptions& options) {
  if (options.token.size() > TcpStoreLimits::kMaxTokenBytes)
    return Status::InvalidArgument("tcp store: token longer than 4 KiB");
  std::unique_ptr<TcpStore> store(new TcpStore(options));
  if (options.is_server) {
    TcpStoreServerOptions server_options;
    server_options.host = options.bind_host;
    server_options.port = options.port;
    server_options.token = options.token;
    COMMKIT_ASSIGN_OR_RETURN(store->server_, TcpStoreServer::Start(server_options));
    store->options_.port = store->server_->port();
  }
  // Connect once now, so configuration errors (wrong token, nothing listening) surface at creation.
  COMMKIT_RETURN_IF_ERROR(store->Ping());
  return store;
}

Result<std::string> TcpStore::Call(std::uint8_t op, const std::string& payload, std::chrono::milliseconds wait) {
  // Individually valid keys and values can still add up to a frame the server must refuse (it would
  // close the connection and the caller would see a misleading connection error).
  if (payload.size() + 1 > kMaxFrameBytes)
    return Status::InvalidArgument(StrCat(Describe(), ": request of ", HumanBytes(static_cast<double>(payload.size())),
                                          " exceeds the protocol's ", HumanBytes(static_cast<double>(kMaxFrameBytes)),
                                          " frame limit; split it into several calls"));
  std::unique_ptr<Connection> conn;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    while (!idle_.empty() && !conn) {
      conn = std::move(idle_.back());
      idle_.pop_back();
      if (!conn->StillOpen()) conn.reset();
    }
  }
  if (!conn) {
    // Connect with exponential backoff and jitter: at rendezvous the server may not be up yet, or its
    // listen queue may overflow when thousands of ranks arrive at once.
    auto deadline = Clock::now() + options_.connect_timeout;
    std::mt19937 rng(std::random_device{}());
    auto backoff = std::chrono::milliseconds(10);
    Status last;
    int attempts = 0;
    while (true) {
      ++attempts;
      auto fd = net::ConnectWithDeadline(options_.host, options_.port, std::min(deadline, Clock::now() + std::chrono::seconds(10)));
      if (fd.ok()) {
        conn = std::make_unique<Connection>(*fd);
        break;
      }
      last = fd.status();
      if (last.code() == StatusCode::kUnavailable && last.message().find("cannot resolve") != std::string::npos) break;
      if (Clock::now() + backoff >= deadline) break;
      std::uniform_int_distribution<int> jitter(0, static_cast<int>(backoff.count()));
      std::this_thread::sleep_for(backoff + std::chrono::milliseconds(jitter(rng)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
    if (!conn)
      return Status::Unavailable(StrCat(Describe(), ": cannot connect after ", attempts, " attempts over ",
                                        HumanSeconds(options_.connect_timeout.count() / 1000.0), ": ", last.message(),
                                        ". Is rank 0 (the store server) running, and is ", options_.host, ":",
                                        options_.port, " reachable from this host?"));
    // Handshake.
    Writer hello;
    hello.data().append(kMagic, 4);
    hello.U16(kVersion);
    hello.U16(0);
    hello.U32(static_cast<std::uint32_t>(options_.token.size()));
    hello.data().append(options_.token);
    auto hs_deadline = Clock::now() + options_.handshake_timeout;
    Status s = conn->SendAll(hello.data(), hs_deadline);
    char head[5];
    if (s.ok()) s = conn->RecvExact(head, 5, hs_deadline);
    if (!s.ok()) return s.WithContext(StrCat(Describe(), ": handshake"));
    std::uint32_t msg_len;
    std::memcpy(&msg_len, head + 1, 4);
    if (std::memcmp(head, "commk", 5) == 0 || msg_len > TcpStoreLimits::kMaxTokenBytes)
      return Status::Unavailable(StrCat(Describe(), ": the server does not speak this protocol version"));
    std::string msg(msg_len, '\0');
    if (msg_len) COMMKIT_RETURN_IF_ERROR(conn->RecvExact(msg.data(), msg_len, hs_deadline).WithContext(Describe()));
    auto code = static_cast<StatusCode>(head[0]);
    if (code != StatusCode::kOk) return Status(code, StrCat(Describe(), " rejected this client: ", msg));
  }

  auto deadline = Clock::now() + (wait.count() > 0 ? wait + kReplyMargin : std::chrono::milliseconds(kShortCallTimeout));
  std::string frame = Frame(op, payload);
  Status s = conn->SendAll(frame, deadline);
  char head[5];
  if (s.ok()) s = conn->RecvExact(head, 5, deadline);
  std::string body;
  if (s.ok()) {
    std::uint32_t len;
    std::memcpy(&len, head, 4);
    if (len == 0 || len > kMaxFrameBytes) {
      s = Status::DataLoss(StrCat("malformed reply (length ", len, ")"));
    } else {
      body.resize(len - 1);
      if (len > 1) s = conn->RecvExact(body.data(), len - 1, deadline);
    }
  }
  if (!s.ok()) {
    // The connection is in an unknown state: drop it; the next call reconnects.
    if (s.code() == StatusCode::kTimeout)
      return Status::Timeout(StrCat(Describe(), ": no reply within ", HumanSeconds((wait + kReplyMargin).count() / 1000.0),
                                    " (server overloaded or network partition)"));
    return s.WithContext(Describe());
  }
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (static_cast<int>(idle_.size()) < options_.max_connections) idle_.push_back(std::move(conn));
  }
  auto code = static_cast<StatusCode>(head[4]);
  if (code == StatusCode::kOk) return body;
  if (code == StatusCode::kTimeout) return Status::Timeout(body);  // body = missing keys (decoded by the caller)
  Reader r(body);
  auto message = r.Str(1 << 20);
  return Status(code, StrCat(Describe(), ": ", message ? *message : std::string("error")));
}

namespace {

Status WaitError(const TcpStore& store, const Status& s, std::size_t total, std::chrono::milliseconds timeout) {
  if (s.code() != StatusCode::kTimeout) return s;
  Reader r(s.message());
  auto missing = r.List(TcpStoreLimits::kMaxKeysPerRequest, TcpStoreLimits::kMaxKeyBytes);
  if (!missing) return s;  // a client-side timeout already has its message
  return StoreWaitTimeout(store.Describe(), *missing, total, timeout);
}

Status CheckKey(const TcpStore& store, std::string_view key) {
  if (key.size() > TcpStoreLimits::kMaxKeyBytes)
    return Status::InvalidArgument(StrCat(store.Describe(), ": key of ", key.size(), " bytes exceeds the 8 KiB limit"));
  return Status::Ok();
}

Status CheckValue(const TcpStore& store, std::string_view value) {
  if (value.size() > TcpStoreLimits::kMaxValueBytes)
    return Status::InvalidArgument(StrCat(store.Describe(), ": value of ", HumanBytes(static_cast<double>(value.size())),
                                          " exceeds the 64 MiB limit"));
  return Status::Ok();
}

Status CheckKeys(const TcpStore& store, const std::vector<std::string>& keys) {
  if (keys.size() > TcpStoreLimits::kMaxKeysPerRequest)
    return Status::InvalidArgument(StrCat(store.Describe(), ": ", keys.size(), " keys in one request (limit 131072)"));
  for (const auto& k : keys) COMMKIT_RETURN_IF_ERROR(CheckKey(store, k));
  return Status::Ok();
}

std::uint64_t Ms(std::chrono::milliseconds t) { return t.count() < 0 ? 0 : static_cast<std::uint64_t>(t.count()); }

}  // namespace

Status TcpStore::Set(std::string_view key, std::string_view value) {
  COMMKIT_RETURN_IF_ERROR(CheckKey(*this, key));
  COMMKIT_RETURN_IF_ERROR(CheckValue(*this, value));
  Writer w;
  w.Str(key);
  w.Str(value);
  return Call(static_cast<std::uint8_t>(Op::kSet), w.data(), {}).status();
}

Result<std::string> TcpStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(CheckKey(*this, key));
  Writer w;
  w.Str(key);
  w.U64(Ms(timeout));
  auto reply = Call(static_cast<std::uint8_t>(Op::kGet), w.data(), timeout);
  if (!reply.ok()) return WaitError(*this, reply.status(), 1, timeout);
  Reader r(*reply);
  auto value = r.Str(TcpStoreLimits::kMaxValueBytes);
  if (!value) return Status::DataLoss(StrCat(Describe(), ": malformed get reply"));
  return std::move(*value);
}

Result<std::int64_t> TcpStore::Add(std::string_view key, std::int64_t delta) {
  COMMKIT_RETURN_IF_ERROR(CheckKey(*this, key));
  Writer w;
  w.Str(key);
  w.I64(delta);
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kAdd), w.data(), {}));
  Reader r(reply);
  auto v = r.I64();
  if (!v) return Status::DataLoss(StrCat(Describe(), ": malformed add reply"));
  return *v;
}

Result<std::string> TcpStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  COMMKIT_RETURN_IF_ERROR(CheckKey(*this, key));
  COMMKIT_RETURN_IF_ERROR(CheckValue(*this, expected));
  COMMKIT_RETURN_IF_ERROR(CheckValue(*this, desired));
  Writer w;
  w.Str(key);
  w.Str(expected);
  w.Str(desired);
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kCompareSet), w.data(), {}));
  Reader r(reply);
  auto v = r.Str(TcpStoreLimits::kMaxValueBytes);
  if (!v) return Status::DataLoss(StrCat(Describe(), ": malformed compare_set reply"));
  return std::move(*v);
}

Result<bool> TcpStore::Check(const std::vector<std::string>& keys) {
  COMMKIT_RETURN_IF_ERROR(CheckKeys(*this, keys));
  Writer w;
  w.List(keys);
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kCheck), w.data(), {}));
  return !reply.empty() && reply[0] == 1;
}

Status TcpStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(CheckKeys(*this, keys));
  Writer w;
  w.List(keys);
  w.U64(Ms(timeout));
  auto reply = Call(static_cast<std::uint8_t>(Op::kWait), w.data(), timeout);
  if (!reply.ok()) return WaitError(*this, reply.status(), keys.size(), timeout);
  return Status::Ok();
}

Result<bool> TcpStore::Delete(std::string_view key) {
  COMMKIT_RETURN_IF_ERROR(CheckKey(*this, key));
  Writer w;
  w.Str(key);
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kDelete), w.data(), {}));
  return !reply.empty() && reply[0] == 1;
}

Result<std::int64_t> TcpStore::NumKeys() {
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kNumKeys), "", {}));
  Reader r(reply);
  auto v = r.I64();
  if (!v) return Status::DataLoss(StrCat(Describe(), ": malformed num_keys reply"));
  return *v;
}

Result<std::vector<std::string>> TcpStore::MultiGet(const std::vector<std::string>& keys,
                                                    std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(CheckKeys(*this, keys));
  Writer w;
  w.List(keys);
  w.U64(Ms(timeout));
  auto reply = Call(static_cast<std::uint8_t>(Op::kMultiGet), w.data(), timeout);
  if (!reply.ok()) return WaitError(*this, reply.status(), keys.size(), timeout);
  Reader r(*reply);
  auto values = r.List(TcpStoreLimits::kMaxKeysPerRequest, TcpStoreLimits::kMaxValueBytes);
  if (!values || values->size() != keys.size()) return Status::DataLoss(StrCat(Describe(), ": malformed multi_get reply"));
  return std::move(*values);
}

Status TcpStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    return Status::InvalidArgument(StrCat(Describe(), ": multi_set with ", keys.size(), " keys but ", values.size(), " values"));
  COMMKIT_RETURN_IF_ERROR(CheckKeys(*this, keys));
  for (const auto& v : values) COMMKIT_RETURN_IF_ERROR(CheckValue(*this, v));
  Writer w;
  w.List(keys);
  w.List(values);
  return Call(static_cast<std::uint8_t>(Op::kMultiSet), w.data(), {}).status();
}

Status TcpStore::Ping() {
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Call(static_cast<std::uint8_t>(Op::kPing), "", {}));
  if (reply != "pong") return Status::DataLoss(StrCat(Describe(), ": unexpected ping reply"));
  return Status::Ok();
}

}  // namespace commkit
