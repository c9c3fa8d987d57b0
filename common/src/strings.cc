#include "commkit/common/strings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace commkit {

std::vector<std::string> Split(std::string_view text, char sep, bool skip_empty) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = text.find(sep, start);
    std::string_view part = text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start);
    if (!(skip_empty && part.empty())) out.emplace_back(part);
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string_view Trim(std::string_view text) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

bool StartsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string ToLower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::optional<std::int64_t> ParseInt(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> ParseDouble(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return std::nullopt;
  std::string copy(text);
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

Result<std::size_t> ParseByteSize(std::string_view text) {
  std::string t = ToLower(Trim(text));
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(StrCat("bad size '", text, "': ", why,
                                          " (use bytes with an optional K, M or G suffix, e.g. 8, 64K, 1M)"));
  };
  if (t.empty()) return bad("empty");
  for (std::string_view suffix : {"ib", "b"}) {
    if (t.size() > suffix.size() && t.ends_with(suffix)) {
      t.resize(t.size() - suffix.size());
      break;
    }
  }
  double mult = 1;
  switch (t.back()) {
    case 'k': mult = 1024.0; break;
    case 'm': mult = 1024.0 * 1024; break;
    case 'g': mult = 1024.0 * 1024 * 1024; break;
    case 't': mult = 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
  }
  if (mult != 1) t.pop_back();
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.')) return bad("not a number");
  auto value = ParseDouble(t);
  if (!value || !std::isfinite(*value) || *value < 0) return bad("not a non-negative number");
  const double bytes = *value * mult;
  if (bytes >= static_cast<double>(std::numeric_limits<std::size_t>::max() / 2)) return bad("too large");
  if (bytes != std::floor(bytes)) return bad("not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

std::string HumanBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0 || bytes == std::floor(bytes)) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", bytes, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string HumanSeconds(double seconds) {
  char buf[64];
  double a = std::fabs(seconds);
  if (a >= 1.0 || a == 0.0) {
    std::snprintf(buf, sizeof(buf), "%.3g s", seconds);
  } else if (a >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.3g ms", seconds * 1e3);
  } else if (a >= 1e-6) {
    std::snprintf(buf, sizeof(buf), "%.3g us", seconds * 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g ns", seconds * 1e9);
  }
  return buf;
}

std::string ShellQuote(std::string_view word) {
  if (word.empty()) return "''";
  const bool safe = std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

}  // namespace commkit
