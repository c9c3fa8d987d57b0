#include "store_adapter.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <exception>

#include "commkit/common/strings.h"

namespace commkit::torch_ext {

namespace {

std::vector<std::uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<std::uint8_t>& v) { return {v.begin(), v.end()}; }

bool MentionsTimeout(std::string_view what) {
  std::string lower(what);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
}

// The first line of a c10 error (the rest is a C++ backtrace nobody asked for).
std::string FirstLine(const char* what) {
  std::string s(what);
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// Runs `fn`, turning whatever c10d throws into a Status that names the store and the call.
template <typename Fn>
Status Guard(const std::string& who, std::string_view call, Fn&& fn) {
  try {
    fn();
    return Status::Ok();
  } catch (const c10::DistStoreError& e) {
    std::string msg = StrCat(who, ": ", call, ": ", FirstLine(e.what()));
    return MentionsTimeout(e.what()) ? Status::Timeout(msg) : Status::RemoteError(msg);
  } catch (const std::exception& e) {
    return Status::RemoteError(StrCat(who, ": ", call, ": ", FirstLine(e.what())));
  }
}

}  // namespace

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string what)
    : store_(std::move(store)), what_(std::move(what)) {
  set_timeout(std::chrono::duration_cast<std::chrono::milliseconds>(store_->getTimeout()));
}

Status C10dStore::Set(std::string_view key, std::string_view value) {
  return Guard(what_, StrCat("set ", key), [&] { store_->set(std::string(key), Bytes(value)); });
}

Result<std::string> C10dStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(Wait({std::string(key)}, timeout));
  std::string out;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, StrCat("get ", key), [&] { out = Text(store_->get(std::string(key))); }));
  return out;
}

Result<std::int64_t> C10dStore::Add(std::string_view key, std::int64_t delta) {
  std::int64_t out = 0;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, StrCat("add ", key), [&] { out = store_->add(std::string(key), delta); }));
  return out;
}

Result<std::string> C10dStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  std::string out;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, StrCat("compare_set ", key), [&] {
    out = Text(store_->compareSet(std::string(key), Bytes(expected), Bytes(desired)));
  }));
  // c10d answers `expected` for an absent key with a non-empty `expected`; commkit's contract says
  // the value held afterwards, which is none.
  if (!expected.empty() && out == expected && out != desired) {
    auto present = Check({std::string(key)});
    if (present.ok() && !*present) return std::string();
  }
  return out;
}

Result<bool> C10dStore::Check(const std::vector<std::string>& keys) {
  bool out = false;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, "check", [&] { out = store_->check(keys); }));
  return out;
}

Status C10dStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return Status::Ok();
  Status s = Guard(what_, "wait", [&] { store_->wait(keys, timeout); });
  if (s.code() != StatusCode::kTimeout) return s;
  // Name the keys still missing, as every commkit store does.
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    auto present = Check({k});
    if (!present.ok()) return s;
    if (!*present) missing.push_back(k);
  }
  return StoreWaitTimeout(what_, missing, keys.size(), timeout);
}

Result<bool> C10dStore::Delete(std::string_view key) {
  bool out = false;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, StrCat("delete ", key), [&] { out = store_->deleteKey(std::string(key)); }));
  return out;
}

Result<std::int64_t> C10dStore::NumKeys() {
  std::int64_t out = 0;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, "num_keys", [&] { out = store_->getNumKeys(); }));
  return out;
}

Result<std::vector<std::string>> C10dStore::MultiGet(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(Wait(keys, timeout));
  std::vector<std::string> out;
  COMMKIT_RETURN_IF_ERROR(Guard(what_, "multi_get", [&] {
    for (const auto& v : store_->multiGet(keys)) out.push_back(Text(v));
  }));
  return out;
}

Status C10dStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    return Status::InvalidArgument(StrCat(what_, ": multi_set: ", keys.size(), " keys but ", values.size(), " values"));
  std::vector<std::vector<std::uint8_t>> bytes;
  bytes.reserve(values.size());
  for (const auto& v : values) bytes.push_back(Bytes(v));
  return Guard(what_, "multi_set", [&] { store_->multiSet(keys, bytes); });
}

}  // namespace commkit::torch_ext
