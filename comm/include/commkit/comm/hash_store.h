// HashStore: an in-process Store (threads in one process meet through it; tests and the loopback
// paths use it). Blocking calls wait on a condition variable, bounded by their timeout.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "commkit/comm/store.h"

namespace commkit {

class HashStore final : public Store {
 public:
  HashStore() = default;

  std::string Describe() const override { return "hash store"; }
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

 private:
  // Waits with mu_ held; returns the missing keys (empty on success).
  std::vector<std::string> WaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> data_;
};

}  // namespace commkit
