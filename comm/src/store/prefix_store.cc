#include "commkit/comm/prefix_store.h"

#include "commkit/common/strings.h"

namespace commkit {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  COMMKIT_CHECK(inner_ != nullptr, "PrefixStore needs an underlying store");
  timeout_ = inner_->timeout();
}

std::string PrefixStore::Describe() const { return StrCat(inner_->Describe(), " (prefix '", prefix_, "')"); }

std::string PrefixStore::Key(std::string_view key) const { return StrCat(prefix_, "/", key); }

std::vector<std::string> PrefixStore::Keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(Key(k));
  return out;
}

// "tcp store h:p: wait timed out ...: keys still missing: [job/rank/1]" -> "... (prefix 'job') ...: [rank/1]"
Status PrefixStore::Unprefix(const Status& status) const {
  if (status.ok()) return status;
  std::string message = status.message();
  std::string inner_name = inner_->Describe();
  if (StartsWith(message, inner_name)) message = Describe() + message.substr(inner_name.size());
  std::string needle = prefix_ + "/";
  for (std::size_t pos = message.find(needle); pos != std::string::npos; pos = message.find(needle, pos))
    message.erase(pos, needle.size());
  return Status(status.code(), message);
}

Status PrefixStore::Set(std::string_view key, std::string_view value) { return Unprefix(inner_->Set(Key(key), value)); }

Result<std::string> PrefixStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  auto r = inner_->Get(Key(key), timeout);
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Result<std::int64_t> PrefixStore::Add(std::string_view key, std::int64_t delta) {
  auto r = inner_->Add(Key(key), delta);
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Result<std::string> PrefixStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  auto r = inner_->CompareSet(Key(key), expected, desired);
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Result<bool> PrefixStore::Check(const std::vector<std::string>& keys) {
  auto r = inner_->Check(Keys(keys));
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return Unprefix(inner_->Wait(Keys(keys), timeout));
}

Result<bool> PrefixStore::Delete(std::string_view key) {
  auto r = inner_->Delete(Key(key));
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Result<std::int64_t> PrefixStore::NumKeys() { return inner_->NumKeys(); }

Result<std::vector<std::string>> PrefixStore::MultiGet(const std::vector<std::string>& keys,
                                                       std::chrono::milliseconds timeout) {
  auto r = inner_->MultiGet(Keys(keys), timeout);
  if (!r.ok()) return Unprefix(r.status());
  return r;
}

Status PrefixStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  return Unprefix(inner_->MultiSet(Keys(keys), values));
}

}  // namespace commkit
