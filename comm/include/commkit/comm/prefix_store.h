// PrefixStore: a namespace inside another store ("<prefix>/<key>"), for sub-groups and for several
// jobs sharing one store. Error messages show the caller's own key names.
#pragma once

#include <memory>

#include "commkit/comm/store.h"

namespace commkit {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  const std::string& prefix() const { return prefix_; }
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
  // Counts the keys of the whole underlying store (stores cannot count by prefix cheaply).
  Result<std::int64_t> NumKeys() override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;

 private:
  std::string Key(std::string_view key) const;
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;
  Status Unprefix(const Status& status) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace commkit
