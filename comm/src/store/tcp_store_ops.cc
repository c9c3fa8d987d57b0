// TcpStoreServer's request handlers: the key-value operations, parked requests and their wake-ups.
#include <algorithm>
#include <cstring>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "tcp_protocol.h"
#include "tcp_store_server_impl.h"

namespace commkit {

using namespace tcp_store;

bool TcpStoreServer::Impl::Handle(int fd, Conn& conn, const std::string& frame) {
  Reader r(frame);
  auto op_byte = r.U8();
  Count([](Stats& s) { ++s.requests; });
  auto bad = [&](std::string_view what) { return ProtocolError(fd, conn, StrCat("malformed ", what, " request")); };
  switch (static_cast<Op>(*op_byte)) {
    case Op::kSet: {
      auto key = r.Str(kKey);
      auto value = r.Str(kValue);
      if (!key || !value || !r.empty()) return bad("set");
      data_.insert_or_assign(*key, std::move(*value));
      ReplyOk(fd, conn, "");
      Notify(*key);
      break;
    }
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet: {
      std::vector<std::string> keys;
      if (static_cast<Op>(*op_byte) == Op::kGet) {
        auto key = r.Str(kKey);
        if (!key) return bad("get");
        keys.push_back(std::move(*key));
      } else {
        auto list = r.List(kKeys, kKey);
        if (!list) return bad("wait");
        keys = std::move(*list);
      }
      auto timeout_ms = r.U64();
      if (!timeout_ms || !r.empty()) return bad("wait");
      auto capped = std::min<std::uint64_t>(*timeout_ms, 7ull * 24 * 3600 * 1000);
      conn.pending = Pending{static_cast<Op>(*op_byte), std::move(keys),
                             Clock::now() + std::chrono::milliseconds(capped)};
      if (!TryComplete(fd, conn)) Watch(fd, conn.pending->keys);
      break;
    }
    case Op::kAdd: {
      auto key = r.Str(kKey);
      auto delta = r.I64();
      if (!key || !delta || !r.empty()) return bad("add");
      std::int64_t value = 0;
      auto it = data_.find(*key);
      if (it != data_.end()) {
        auto current = ParseInt(it->second);
        if (!current) {
          ReplyError(fd, conn, StatusCode::kInvalidArgument,
                     StrCat("add on key '", *key, "' whose value is not an integer"));
          break;
        }
        value = *current;
      }
      // A hostile or buggy client must not make the server overflow (undefined behaviour).
      if (__builtin_add_overflow(value, *delta, &value)) {
        ReplyError(fd, conn, StatusCode::kInvalidArgument,
                   StrCat("add of ", *delta, " to key '", *key, "' overflows a 64-bit integer"));
        break;
      }
      data_.insert_or_assign(*key, std::to_string(value));
      Writer w;
      w.I64(value);
      ReplyOk(fd, conn, w.data());
      Notify(*key);
      break;
    }
    case Op::kCompareSet: {
      auto key = r.Str(kKey);
      auto expected = r.Str(kValue);
      auto desired = r.Str(kValue);
      if (!key || !expected || !desired || !r.empty()) return bad("compare_set");
      Writer w;
      auto it = data_.find(*key);
      bool changed = false;
      if (it == data_.end()) {
        if (expected->empty()) {
          data_.emplace(*key, *desired);
          w.Str(*desired);
          changed = true;
        } else {
          w.Str("");
        }
      } else if (it->second == *expected) {
        it->second = *desired;
        w.Str(*desired);
        changed = true;
      } else {
        w.Str(it->second);
      }
      ReplyOk(fd, conn, w.data());
      if (changed) Notify(*key);
      break;
    }
    case Op::kCheck: {
      auto keys = r.List(kKeys, kKey);
      if (!keys || !r.empty()) return bad("check");
      bool all = std::all_of(keys->begin(), keys->end(), [&](const std::string& k) { return data_.count(k) > 0; });
      Writer w;
      w.U8(all ? 1 : 0);
      ReplyOk(fd, conn, w.data());
      break;
    }
    case Op::kDelete: {
      auto key = r.Str(kKey);
      if (!key || !r.empty()) return bad("delete");
      Writer w;
      w.U8(data_.erase(*key) ? 1 : 0);
      ReplyOk(fd, conn, w.data());
      break;
    }
    case Op::kNumKeys: {
      if (!r.empty()) return bad("num_keys");
      Writer w;
      w.I64(static_cast<std::int64_t>(data_.size()));
      ReplyOk(fd, conn, w.data());
      break;
    }
    case Op::kMultiSet: {
      auto keys = r.List(kKeys, kKey);
      auto values = r.List(kKeys, kValue);
      if (!keys || !values || !r.empty() || keys->size() != values->size()) return bad("multi_set");
      for (std::size_t i = 0; i < keys->size(); ++i) data_.insert_or_assign((*keys)[i], std::move((*values)[i]));
      ReplyOk(fd, conn, "");
      for (const auto& k : *keys) Notify(k);
      break;
    }
    case Op::kPing:
      if (!r.empty()) return bad("ping");
      ReplyOk(fd, conn, "pong");
      break;
    default:
      return ProtocolError(fd, conn, StrCat("unknown operation ", static_cast<int>(*op_byte)));
  }
  Count([&](Stats& s) { s.keys = static_cast<std::int64_t>(data_.size()); });
  return true;
}

bool TcpStoreServer::Impl::TryComplete(int fd, Conn& conn) {
  auto& p = *conn.pending;
  for (const auto& k : p.keys)
    if (data_.find(k) == data_.end()) return false;
  Writer w;
  if (p.op == Op::kGet) {
    w.Str(data_.find(p.keys[0])->second);
  } else if (p.op == Op::kMultiGet) {
    std::size_t total = 4;
    for (const auto& k : p.keys) total += 4 + data_.find(k)->second.size();
    if (total + 1 > kMaxFrameBytes) {  // the reply would break the frame bound (or wrap the u32)
      conn.pending.reset();
      ReplyError(fd, conn, StatusCode::kInvalidArgument,
                 StrCat("multi_get reply would be ", total, " bytes, over the ", kMaxFrameBytes,
                        "-byte frame limit; fetch fewer keys per call"));
      return true;
    }
    w.U32(static_cast<std::uint32_t>(p.keys.size()));
    for (const auto& k : p.keys) w.Str(data_.find(k)->second);
  }
  conn.pending.reset();
  ReplyOk(fd, conn, w.data());
  return true;
}

void TcpStoreServer::Impl::Watch(int fd, const std::vector<std::string>& keys) {
  for (const auto& k : keys) watchers_[k].insert(fd);
}

void TcpStoreServer::Impl::Unwatch(int fd, const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    it->second.erase(fd);
    if (it->second.empty()) watchers_.erase(it);
  }
}

void TcpStoreServer::Impl::Notify(const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::set<int> fds = it->second;
  for (int fd : fds) {
    auto c = conns_.find(fd);
    if (c == conns_.end() || !c->second.pending) continue;
    auto keys = c->second.pending->keys;
    if (TryComplete(fd, c->second)) {
      Unwatch(fd, keys);
      if (!Process(fd, c->second)) c->second.closing = true;  // requests queued behind the parked one
    }
  }
}
}  // namespace commkit
