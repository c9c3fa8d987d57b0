// Store: the key-value control plane used for rendezvous (TcpStore, FileStore, EtcdStore, HashStore,
// PrefixStore). Keys are strings; values are byte strings (std::string holds any bytes).
//
// Contract for every implementation:
// - Thread-safe: any thread may call any method concurrently.
// - Every call that can block takes a timeout and never blocks longer (plus a small I/O margin). A
//   timeout is StatusCode::kTimeout and its message names the keys still missing and the time waited:
//   "store wait timed out after 30 s: keys still missing: [rank/5/addr, rank/7/addr]".
// - Errors name the store ("tcp store 10.0.0.1:29500") and say what to do where there is something to do.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

  virtual ~Store() = default;

  // A short description for error messages ("tcp store 127.0.0.1:29500", "file store /nfs/job/rdzv").
  virtual std::string Describe() const = 0;

  // Sets key to value, replacing any old value; wakes waiters on key.
  virtual Status Set(std::string_view key, std::string_view value) = 0;

  // Waits up to `timeout` for key to exist, then returns its value.
  virtual Result<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  Result<std::string> Get(std::string_view key) { return Get(key, timeout_); }

  // Atomically adds delta to the integer stored at key (created as 0; the value is stored as decimal
  // text) and returns the new value. InvalidArgument when the current value is not an integer.
  virtual Result<std::int64_t> Add(std::string_view key, std::int64_t delta) = 0;

  // Atomically: if key holds `expected` (or is absent and `expected` is empty), set it to `desired`.
  // Returns the value the key holds afterwards (desired on success, the current value otherwise;
  // empty when the key is absent and expected was non-empty).
  virtual Result<std::string> CompareSet(std::string_view key, std::string_view expected,
                                         std::string_view desired) = 0;

  // True when every key exists. Never blocks.
  virtual Result<bool> Check(const std::vector<std::string>& keys) = 0;

  // Waits up to `timeout` for every key to exist.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  Status Wait(const std::vector<std::string>& keys) { return Wait(keys, timeout_); }

  // Removes key; returns whether it existed.
  virtual Result<bool> Delete(std::string_view key) = 0;

  // Number of keys in the store (for a PrefixStore: in the whole underlying store).
  virtual Result<std::int64_t> NumKeys() = 0;

  // Waits up to `timeout` for all keys, then returns their values in order.
  virtual Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    std::chrono::milliseconds timeout) = 0;
  // Sets keys[i] = values[i] for all i (InvalidArgument when sizes differ).
  virtual Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) = 0;

  // The default timeout of the overloads without one.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// The message shared by every store's wait timeout, so users see the same words everywhere:
// "<describe>: wait timed out after 30 s: keys still missing: [a, b] (waited for 3 keys)".
Status StoreWaitTimeout(std::string_view describe, const std::vector<std::string>& missing,
                        std::size_t total_keys, std::chrono::milliseconds waited);

}  // namespace commkit
