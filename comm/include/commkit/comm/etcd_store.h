// EtcdStore: a Store on an etcd v3 cluster, spoken through etcd's HTTP/JSON gateway (/v3/kv/*), the
// rendezvous that Kubernetes-style deployments (PyTorchJob with an etcd rendezvous backend) use.
//
// Keys live under `prefix` (default "commkit/"); values are etcd values as is. Atomic operations
// (add, compare_set) are etcd transactions comparing the key's revision or value; blocking calls poll
// with a backoff (1 ms to 100 ms) bounded by their timeout. Every HTTP request has a deadline.
// Gateway: /v3/ (etcd >= 3.4; Debian 12's etcd-server is 3.4.23); Connect falls back to /v3beta/ for
// etcd 3.3. One short-lived HTTP/1.1 connection per request (Connection: close); no TLS or auth.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <memory>
#include <optional>
#include <string>

#include "commkit/comm/store.h"

namespace commkit {

struct EtcdStoreOptions {
  std::string host = "127.0.0.1";
  int port = 2379;
  std::string prefix = "commkit/";
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);  // per HTTP request
  // With a TTL, every key this client writes is attached to an etcd lease that a background thread
  // renews (every TTL/3, at most every minute): a crashed run's keys vanish a TTL after its last
  // client died instead of lingering under the prefix. 0 = keys never expire.
  std::chrono::seconds lease_ttl{0};
};

class EtcdStore final : public Store {
 public:
  // Connects and checks the server answers (a range request); Unavailable names the endpoint.
  static Result<std::unique_ptr<EtcdStore>> Connect(const EtcdStoreOptions& options);
  ~EtcdStore() override;
  // The lease keys are written under (0 without lease_ttl).
  std::int64_t lease() const { return lease_; }

  std::string Describe() const override;
  Status Set(std::string_view key, std::string_view value) override;
  using Store::Get;
  Result<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::int64_t> Add(std::string_view key, std::int64_t delta) override;
  Result<std::string> CompareSet(std::string_view key, std::string_view expected, std::string_view desired) override;
  Result<bool> Check(const std::vector<std::string>& keys) override;
  using Store::Wait;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Delete(std::string_view key) override;
  // Keys under the prefix.
  Result<std::int64_t> NumKeys() override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;

  struct Value {
    std::string value;
    std::int64_t mod_revision = 0;
  };

 private:
  explicit EtcdStore(EtcdStoreOptions options) : options_(std::move(options)) { timeout_ = options_.timeout; }
  // POST a JSON body to /<api_>/<path>; returns the response JSON text.
  Result<std::string> Post(std::string_view path, const std::string& body) const;
  Result<std::optional<Value>> Range(std::string_view key) const;
  Result<std::vector<std::string>> Missing(const std::vector<std::string>& keys) const;
  void KeepAlive();

  EtcdStoreOptions options_;
  std::int64_t lease_ = 0;
  std::thread keepalive_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::string api_ = "v3";  // gateway prefix: "v3" (etcd >= 3.4) or "v3beta" (etcd 3.3), chosen by Connect
};

}  // namespace commkit
