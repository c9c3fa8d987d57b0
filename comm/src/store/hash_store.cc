#include "commkit/comm/hash_store.h"

#include "commkit/common/strings.h"

namespace commkit {

Status HashStore::Set(std::string_view key, std::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_.insert_or_assign(std::string(key), std::string(value));
  }
  cv_.notify_all();
  return Status::Ok();
}

std::vector<std::string> HashStore::WaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (data_.find(k) == data_.end()) out.push_back(k);
    return out;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = missing();
    if (left.empty()) return left;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return missing();
  }
}

Result<std::string> HashStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::string> keys{std::string(key)};
  auto missing = WaitLocked(lock, keys, timeout);
  if (!missing.empty()) return StoreWaitTimeout(Describe(), missing, 1, timeout);
  return data_.find(key)->second;
}

Result<std::int64_t> HashStore::Add(std::string_view key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      auto current = ParseInt(it->second);
      if (!current)
        return Status::InvalidArgument(StrCat(Describe(), ": add on key '", key, "' whose value is not an integer"));
      value = *current;
    }
    if (__builtin_add_overflow(value, delta, &value))
      return Status::InvalidArgument(StrCat(Describe(), ": add of ", delta, " to key '", key, "' overflows a 64-bit integer"));
    data_.insert_or_assign(std::string(key), std::to_string(value));
  }
  cv_.notify_all();
  return value;
}

Result<std::string> HashStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return std::string();
      data_.emplace(std::string(key), std::string(desired));
      result = std::string(desired);
    } else if (it->second == expected) {
      it->second = std::string(desired);
      result = it->second;
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

Result<bool> HashStore::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys)
    if (data_.find(k) == data_.end()) return false;
  return true;
}

Status HashStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto missing = WaitLocked(lock, keys, timeout);
  if (!missing.empty()) return StoreWaitTimeout(Describe(), missing, keys.size(), timeout);
  return Status::Ok();
}

Result<bool> HashStore::Delete(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  data_.erase(it);
  return true;
}

Result<std::int64_t> HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<std::int64_t>(data_.size());
}

Result<std::vector<std::string>> HashStore::MultiGet(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto missing = WaitLocked(lock, keys, timeout);
  if (!missing.empty()) return StoreWaitTimeout(Describe(), missing, keys.size(), timeout);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(data_.find(k)->second);
  return values;
}

Status HashStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    return Status::InvalidArgument(StrCat(Describe(), ": multi_set with ", keys.size(), " keys but ", values.size(), " values"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < keys.size(); ++i) data_.insert_or_assign(keys[i], values[i]);
  }
  cv_.notify_all();
  return Status::Ok();
}

}  // namespace commkit
