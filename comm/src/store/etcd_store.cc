#include "commkit/comm/etcd_store.h"

#include <nlohmann/json.hpp>
#include <mutex>
#include <thread>

#include "commkit/common/socket.h"
#include "commkit/common/strings.h"
#include "poll_wait.h"

namespace commkit {

using json = nlohmann::json;
using Clock = net::Clock;

namespace {

constexpr std::size_t kMaxReplyBytes = 128 << 20;
constexpr int kMaxTxnOps = 128;  // etcd's default --max-txn-ops
constexpr int kMaxCasRetries = 10000;

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    std::uint32_t v = (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8) | std::uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i < in.size()) {
    std::uint32_t v = std::uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= std::uint8_t(in[i + 1]) << 8;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Unbase64(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

// etcd's gateway encodes int64 as JSON strings and omits zero values.
std::int64_t JsonInt(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_string()) return ParseInt(it->get<std::string>()).value_or(0);
  if (it->is_number_integer()) return it->get<std::int64_t>();
  return 0;
}

// Decodes an HTTP/1.1 response (Connection: close): status code and body (chunked or not).
Result<std::pair<int, std::string>> ParseHttp(const std::string& raw) {
  auto header_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos)
    return Status::DataLoss("not an HTTP response (is this port an etcd client URL?)");
  auto sp = raw.find(' ');
  auto code = ParseInt(raw.substr(sp + 1, 3));
  if (!code) return Status::DataLoss("malformed HTTP status line");
  std::string headers = ToLower(raw.substr(0, header_end));
  std::string body = raw.substr(header_end + 4);
  if (headers.find("transfer-encoding: chunked") != std::string::npos) {
    std::string decoded;
    std::size_t pos = 0;
    while (pos < body.size()) {
      auto eol = body.find("\r\n", pos);
      if (eol == std::string::npos) return Status::DataLoss("truncated chunked body");
      std::string_view size_text = std::string_view(body).substr(pos, eol - pos);
      size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
      if (size_text.empty() || size_text.size() > 8 ||
          size_text.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
        return Status::DataLoss("malformed chunk size in HTTP reply");
      std::size_t len = std::stoul(std::string(size_text), nullptr, 16);
      if (len == 0) break;
      if (len > body.size() - (eol + 2)) return Status::DataLoss("truncated chunk");
      decoded += body.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    body = std::move(decoded);
  }
  return std::make_pair(static_cast<int>(*code), std::move(body));
}

// A put request, attached to the client's lease when it has one.
json PutOp(const std::string& key_b64, const std::string& value_b64, std::int64_t lease) {
  json put = {{"key", key_b64}, {"value", value_b64}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

}  // namespace

std::string EtcdStore::Describe() const {
  return StrCat("etcd store ", options_.host, ":", options_.port, " (prefix '", options_.prefix, "'",
                api_ == "v3" ? "" : ", gateway /" + api_ + "/", ")");
}

Result<std::string> EtcdStore::Post(std::string_view path, const std::string& body) const {
  auto deadline = Clock::now() + options_.request_timeout;
  auto fd = net::ConnectWithDeadline(options_.host, options_.port, deadline);
  if (!fd.ok())
    return Status::Unavailable(StrCat(Describe(), ": ", fd.status().message(), ". Is etcd running and is its client URL ",
                                      options_.host, ":", options_.port, "?"));
  net::Socket socket(*fd);
  std::string request = StrCat("POST /", api_, "/", path, " HTTP/1.1\r\nHost: ", options_.host, ":", options_.port,
                               "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                               "\r\nConnection: close\r\n\r\n", body);
  COMMKIT_RETURN_IF_ERROR(net::SendAll(socket.fd(), request, deadline).WithContext(Describe()));
  auto raw = net::RecvUntilClosed(socket.fd(), kMaxReplyBytes, deadline);
  if (!raw.ok()) return raw.status().WithContext(Describe());
  auto parsed = ParseHttp(*raw);
  if (!parsed.ok()) return parsed.status().WithContext(Describe());
  auto& [code, reply] = *parsed;
  if (code != 200) {
    std::string message = reply;
    auto j = json::parse(reply, nullptr, false);
    if (!j.is_discarded() && j.is_object()) message = j.value("message", j.value("error", reply));
    return Status::BackendError(StrCat(Describe(), ": HTTP ", code, " from /", api_, "/", path, ": ", message));
  }
  return std::move(reply);
}

Result<std::unique_ptr<EtcdStore>> EtcdStore::Connect(const EtcdStoreOptions& options) {
  std::unique_ptr<EtcdStore> store(new EtcdStore(options));
  // etcd >= 3.4 serves the gateway at /v3/; 3.3 only at /v3beta/ (3.2 at /v3alpha/, not supported).
  // A 404 on /v3/ means an older server: fall back once.
  auto probe = store->NumKeys();
  if (!probe.ok() && probe.status().code() == StatusCode::kBackendError &&
      probe.status().message().find("HTTP 404") != std::string::npos) {
    store->api_ = "v3beta";
    probe = store->NumKeys();
  }
  COMMKIT_RETURN_IF_ERROR(probe.status());
  if (options.lease_ttl.count() > 0) {
    json grant = {{"TTL", std::to_string(options.lease_ttl.count())}};
    COMMKIT_ASSIGN_OR_RETURN(std::string reply, store->Post("lease/grant", grant.dump()));
    auto j = json::parse(reply, nullptr, false);
    store->lease_ = j.is_discarded() || !j.is_object() ? 0 : JsonInt(j, "ID");
    if (store->lease_ == 0) return Status::DataLoss(StrCat(store->Describe(), ": malformed lease grant reply: ", reply));
    store->keepalive_ = std::thread([s = store.get()] { s->KeepAlive(); });
  }
  return store;
}

EtcdStore::~EtcdStore() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  // The lease is not revoked: other ranks may still read this rank's keys; they expire a TTL later.
}

void EtcdStore::KeepAlive() {
  // A third of the TTL (at most a minute) between renewals, so two lost renewals still leave time.
  auto period = std::min<std::chrono::milliseconds>(options_.lease_ttl / 3, std::chrono::minutes(1));
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    json req = {{"ID", std::to_string(lease_)}};
    (void)Post("lease/keepalive", req.dump());
    lock.lock();
  }
}

Result<std::optional<EtcdStore::Value>> EtcdStore::Range(std::string_view key) const {
  json req = {{"key", Base64(options_.prefix + std::string(key))}};
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Post("kv/range", req.dump()));
  auto j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(StrCat(Describe(), ": malformed range reply"));
  auto kvs = j.find("kvs");
  if (kvs == j.end() || !kvs->is_array() || kvs->empty()) return std::optional<Value>();
  const json& kv = (*kvs)[0];
  auto value = Unbase64(kv.value("value", ""));
  if (!value) return Status::DataLoss(StrCat(Describe(), ": malformed value encoding"));
  return std::optional<Value>(Value{std::move(*value), JsonInt(kv, "mod_revision")});
}

Status EtcdStore::Set(std::string_view key, std::string_view value) {
  return Post("kv/put", PutOp(Base64(options_.prefix + std::string(key)), Base64(value), lease_).dump()).status();
}

Result<std::vector<std::string>> EtcdStore::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    COMMKIT_ASSIGN_OR_RETURN(auto v, Range(k));
    if (!v) missing.push_back(k);
  }
  return missing;
}

Status EtcdStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return PollForKeys(Describe(), keys, timeout,
                     [this](const std::vector<std::string>& pending) { return Missing(pending); });
}

Result<std::string> EtcdStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys{std::string(key)};
  COMMKIT_ASSIGN_OR_RETURN(auto values, MultiGet(keys, timeout));
  return std::move(values[0]);
}

Result<std::vector<std::string>> EtcdStore::MultiGet(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(Wait(keys, timeout));
  std::vector<std::string> values;
  for (const auto& k : keys) {
    COMMKIT_ASSIGN_OR_RETURN(auto v, Range(k));
    if (!v) return Status::NotFound(StrCat(Describe(), ": key '", k, "' was deleted while reading"));
    values.push_back(std::move(v->value));
  }
  return values;
}

Result<std::string> EtcdStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  std::string full = Base64(options_.prefix + std::string(key));
  json compare;
  if (expected.empty()) {
    // Absent key (create_revision 0) or a key holding "".
    auto current = Range(key);
    if (!current.ok()) return current.status();
    if (*current && !(*current)->value.empty()) return std::move((*current)->value);
    if (*current) compare = {{"key", full}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", ""}};
    else compare = {{"key", full}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
  } else {
    compare = {{"key", full}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", Base64(expected)}};
  }
  json req = {{"compare", json::array({compare})},
              {"success", json::array({{{"request_put", PutOp(full, Base64(desired), lease_)}}})},
              {"failure", json::array({{{"request_range", {{"key", full}}}}})}};
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Post("kv/txn", req.dump()));
  auto j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(StrCat(Describe(), ": malformed txn reply"));
  if (j.value("succeeded", false)) return std::string(desired);
  // Failed: report the current value (empty when absent).
  try {
    const json& kvs = j.at("responses").at(0).at("response_range").at("kvs");
    if (kvs.is_array() && !kvs.empty()) {
      auto v = Unbase64(kvs[0].value("value", ""));
      if (v) return std::move(*v);
    }
  } catch (const json::exception&) {
  }
  return std::string();
}

Result<std::int64_t> EtcdStore::Add(std::string_view key, std::int64_t delta) {
  std::string full = Base64(options_.prefix + std::string(key));
  for (int attempt = 0; attempt < kMaxCasRetries; ++attempt) {
    COMMKIT_ASSIGN_OR_RETURN(auto current, Range(key));
    std::int64_t value = 0;
    json compare;
    if (current) {
      auto parsed = ParseInt(current->value);
      if (!parsed)
        return Status::InvalidArgument(StrCat(Describe(), ": add on key '", key, "' whose value is not an integer"));
      value = *parsed;
      compare = {{"key", full}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", std::to_string(current->mod_revision)}};
    } else {
      compare = {{"key", full}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
    }
    if (__builtin_add_overflow(value, delta, &value))
      return Status::InvalidArgument(StrCat(Describe(), ": add of ", delta, " to key '", key, "' (", current->value,
                                            ") overflows a 64-bit integer"));
    json req = {{"compare", json::array({compare})},
                {"success", json::array({{{"request_put", PutOp(full, Base64(std::to_string(value)), lease_)}}})}};
    COMMKIT_ASSIGN_OR_RETURN(std::string reply, Post("kv/txn", req.dump()));
    auto j = json::parse(reply, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Status::DataLoss(StrCat(Describe(), ": malformed txn reply"));
    if (j.value("succeeded", false)) return value;
  }
  return Status::Aborted(StrCat(Describe(), ": add on '", key, "' lost ", kMaxCasRetries, " races in a row"));
}

Result<bool> EtcdStore::Check(const std::vector<std::string>& keys) {
  COMMKIT_ASSIGN_OR_RETURN(auto missing, Missing(keys));
  return missing.empty();
}

Result<bool> EtcdStore::Delete(std::string_view key) {
  json req = {{"key", Base64(options_.prefix + std::string(key))}};
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Post("kv/deleterange", req.dump()));
  auto j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(StrCat(Describe(), ": malformed delete reply"));
  return JsonInt(j, "deleted") > 0;
}

Result<std::int64_t> EtcdStore::NumKeys() {
  std::string start = options_.prefix;
  std::string end = start;
  // range_end = prefix with its last byte incremented: every key that starts with prefix.
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xFF) end.pop_back();
  if (end.empty()) end = std::string(1, '\0');
  else end.back() = static_cast<char>(end.back() + 1);
  json req = {{"key", Base64(start.empty() ? std::string(1, '\0') : start)}, {"range_end", Base64(end)},
              {"count_only", true}};
  COMMKIT_ASSIGN_OR_RETURN(std::string reply, Post("kv/range", req.dump()));
  auto j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(StrCat(Describe(), ": malformed range reply"));
  return JsonInt(j, "count");
}

Status EtcdStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    return Status::InvalidArgument(StrCat(Describe(), ": multi_set with ", keys.size(), " keys but ", values.size(), " values"));
  for (std::size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
    json ops = json::array();
    for (std::size_t i = begin; i < std::min(keys.size(), begin + kMaxTxnOps); ++i)
      ops.push_back({{"request_put", PutOp(Base64(options_.prefix + keys[i]), Base64(values[i]), lease_)}});
    json req = {{"success", ops}};
    COMMKIT_RETURN_IF_ERROR(Post("kv/txn", req.dump()).status());
  }
  return Status::Ok();
}

}  // namespace commkit
