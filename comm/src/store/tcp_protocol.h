// Wire format of the TcpStore protocol (private to comm/src/store). See docs/store-protocol.md.
//
//   handshake   client -> server:  "CKST" u16 version u16 flags u32 token_len token
//               server -> client:  u8 code (0 = accepted) u32 msg_len msg
//   request     u32 len | u8 op | body (len - 1 bytes)
//   reply       u32 len | u8 code (StatusCode; 0 = OK) | body or, on error, the message
// Integers are little-endian. Strings in bodies are u32 length + bytes; lists are u32 count + strings.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace commkit::tcp_store {

constexpr char kMagic[4] = {'C', 'K', 'S', 'T'};
constexpr std::uint16_t kVersion = 1;
constexpr std::size_t kHelloFixedBytes = 12;  // magic + version + flags + token_len
constexpr std::size_t kMaxFrameBytes = (64u << 20) + (1u << 20);

enum class Op : std::uint8_t {
  kSet = 1,
  kGet = 2,        // key, u64 timeout_ms -> value (parks until the key exists)
  kAdd = 3,        // key, i64 delta -> i64
  kCompareSet = 4, // key, expected, desired -> value
  kCheck = 5,      // keys -> u8
  kWait = 6,       // keys, u64 timeout_ms -> (empty)
  kDelete = 7,     // key -> u8
  kNumKeys = 8,    // -> i64
  kMultiGet = 9,   // keys, u64 timeout_ms -> values
  kMultiSet = 10,  // keys, values
  kPing = 11,      // -> "pong"
};

class Writer {
 public:
  void U8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(std::uint16_t v) { Raw(&v, 2); }
  void U32(std::uint32_t v) { Raw(&v, 4); }
  void U64(std::uint64_t v) { Raw(&v, 8); }
  void I64(std::int64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<std::uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void List(const std::vector<std::string>& items) {
    U32(static_cast<std::uint32_t>(items.size()));
    for (const auto& s : items) Str(s);
  }
  std::string& data() { return out_; }

 private:
  void Raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }  // little-endian hosts
  std::string out_;
};

// Bounds-checked reader: every accessor returns nullopt on truncated or oversized input.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  std::optional<std::uint8_t> U8() {
    if (data_.size() < 1) return std::nullopt;
    auto v = static_cast<std::uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return v;
  }
  std::optional<std::uint16_t> U16() { return Fixed<std::uint16_t>(); }
  std::optional<std::uint32_t> U32() { return Fixed<std::uint32_t>(); }
  std::optional<std::uint64_t> U64() { return Fixed<std::uint64_t>(); }
  std::optional<std::int64_t> I64() { return Fixed<std::int64_t>(); }
  std::optional<std::string> Str(std::size_t max_bytes) {
    auto n = U32();
    if (!n || *n > max_bytes || *n > data_.size()) return std::nullopt;
    std::string s(data_.substr(0, *n));
    data_.remove_prefix(*n);
    return s;
  }
  std::optional<std::vector<std::string>> List(std::size_t max_items, std::size_t max_bytes) {
    auto n = U32();
    if (!n || *n > max_items || *n > data_.size() / 4) return std::nullopt;
    std::vector<std::string> out;
    out.reserve(*n);
    for (std::uint32_t i = 0; i < *n; ++i) {
      auto s = Str(max_bytes);
      if (!s) return std::nullopt;
      out.push_back(std::move(*s));
    }
    return out;
  }
  bool empty() const { return data_.empty(); }

 private:
  template <typename T>
  std::optional<T> Fixed() {
    if (data_.size() < sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, data_.data(), sizeof(T));
    data_.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view data_;
};

// u32 length prefix + contents.
inline std::string Frame(std::uint8_t head, std::string_view body) {
  Writer w;
  w.U32(static_cast<std::uint32_t>(body.size() + 1));
  w.U8(head);
  w.data().append(body.data(), body.size());
  return std::move(w.data());
}

}  // namespace commkit::tcp_store
