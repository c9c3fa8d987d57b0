#include "commkit/comm/hostlist.h"

#include <algorithm>
#include <cctype>

#include "commkit/common/strings.h"

namespace commkit {

namespace {

// Splits on commas that are not inside brackets.
Result<std::vector<std::string>> SplitTopLevel(std::string_view text) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) return Status::InvalidArgument(StrCat("hostlist '", text, "': ']' without '['"));
      --depth;
    }
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
      continue;
    }
    if (depth > 1) return Status::InvalidArgument(StrCat("hostlist '", text, "': nested brackets"));
    current += c;
  }
  if (depth != 0) return Status::InvalidArgument(StrCat("hostlist '", text, "': '[' without ']'"));
  parts.push_back(current);
  return parts;
}

struct RangeValue {
  std::string text;
};

// "01-03,7" -> {"01","02","03","7"}
Result<std::vector<std::string>> ExpandRanges(std::string_view ranges, std::string_view whole, std::size_t max_hosts) {
  std::vector<std::string> out;
  for (const auto& item : Split(ranges, ',')) {
    std::string_view r = Trim(item);
    if (r.empty()) return Status::InvalidArgument(StrCat("hostlist '", whole, "': empty range"));
    auto dash = r.find('-');
    std::string_view lo_text = r.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : r.substr(dash + 1);
    auto digits = [](std::string_view s) {
      return !s.empty() && s.size() <= 18 &&
             std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    };
    if (!digits(lo_text) || !digits(hi_text))
      return Status::InvalidArgument(StrCat("hostlist '", whole, "': range '", r, "' is not numeric"));
    std::int64_t lo = *ParseInt(lo_text);
    std::int64_t hi = *ParseInt(hi_text);
    if (hi < lo) return Status::InvalidArgument(StrCat("hostlist '", whole, "': range '", r, "' is reversed"));
    if (static_cast<std::size_t>(hi - lo) + out.size() >= max_hosts)
      return Status::InvalidArgument(StrCat("hostlist '", whole, "' expands to more than ", max_hosts, " hosts"));
    std::size_t width = lo_text.size() > 1 && lo_text[0] == '0' ? lo_text.size() : 0;
    for (std::int64_t v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view expression, std::size_t max_hosts) {
  std::string_view text = Trim(expression);
  if (text.empty()) return Status::InvalidArgument("hostlist is empty");
  COMMKIT_ASSIGN_OR_RETURN(auto parts, SplitTopLevel(text));
  std::vector<std::string> hosts;
  for (const auto& part : parts) {
    if (part.empty()) return Status::InvalidArgument(StrCat("hostlist '", text, "': empty host name"));
    // Expand bracket groups left to right (cartesian product).
    std::vector<std::string> partial{""};
    std::size_t pos = 0;
    while (pos < part.size()) {
      std::size_t open = part.find('[', pos);
      std::string literal = part.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
      for (auto& p : partial) p += literal;
      if (open == std::string::npos) break;
      std::size_t close = part.find(']', open);
      COMMKIT_ASSIGN_OR_RETURN(auto values,
                               ExpandRanges(std::string_view(part).substr(open + 1, close - open - 1), text, max_hosts));
      if (partial.size() * values.size() + hosts.size() > max_hosts)
        return Status::InvalidArgument(StrCat("hostlist '", text, "' expands to more than ", max_hosts, " hosts"));
      std::vector<std::string> next;
      next.reserve(partial.size() * values.size());
      for (const auto& p : partial)
        for (const auto& v : values) next.push_back(p + v);
      partial = std::move(next);
      pos = close + 1;
    }
    for (auto& p : partial) hosts.push_back(std::move(p));
  }
  return hosts;
}

}  // namespace commkit
