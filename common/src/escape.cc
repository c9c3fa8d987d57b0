#include "commkit/common/escape.h"

#include <cstdint>

namespace commkit {

std::string EscapeControl(std::string_view text, bool keep_newlines) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && !(c == '\n' && keep_newlines)) || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A whole, shortest-form UTF-8 sequence that is not a C1 control (U+0080..U+009F) or a surrogate.
    const std::size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
    bool ok = len != 0 && i + len <= text.size();
    std::uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (ok) {
      ok = !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
           !(cp >= 0x80 && cp <= 0x9f);
    }
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

std::string StripTerminalEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\x1b') {
      out += text[i];
      continue;
    }
    if (i + 1 >= text.size()) break;  // a lone ESC at the end
    const char kind = text[i + 1];
    std::size_t j = i + 2;
    if (kind == '[') {  // CSI: parameter and intermediate bytes 0x20-0x3f, then one final byte 0x40-0x7e
      while (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x20 && static_cast<unsigned char>(text[j]) <= 0x3f) ++j;
      if (j < text.size()) ++j;
    } else if (kind == ']') {  // OSC: up to BEL or ESC '\'
      while (j < text.size() && text[j] != '\a' && !(text[j] == '\x1b' && j + 1 < text.size() && text[j + 1] == '\\')) ++j;
      if (j < text.size()) j += text[j] == '\a' ? 1 : 2;
    } else {  // ESC, intermediate bytes 0x20-0x2f, one final byte ("ESC ( B", "ESC 7")
      j = i + 1;
      while (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x20 && static_cast<unsigned char>(text[j]) <= 0x2f) ++j;
      if (j < text.size()) ++j;
    }
    i = j - 1;
  }
  return out;
}

}  // namespace commkit
