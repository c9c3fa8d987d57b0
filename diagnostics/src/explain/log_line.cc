#include "log_line.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics::explain {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool Contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool AllDigits(std::string_view s) {
  return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), IsDigit);
}

int ToInt(std::string_view s) {
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

void SkipSpaces(std::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
}

// "[rank3]:", "[default3]:", "[trainer3]:", "[trainer0|0]:", "[1,0]<stderr>:" (Open MPI --tag-output).
bool TakeBracketTag(std::string_view& s, LogLine& line) {
  if (s.empty() || s.front() != '[') return false;
  std::size_t close = s.find(']');
  if (close == std::string_view::npos || close > 40) return false;
  std::string_view inner = s.substr(1, close - 1);
  std::string_view rest = s.substr(close + 1);
  std::size_t colon_skip = 0;
  if (!rest.empty() && rest.front() == ':') {
    colon_skip = 1;
  } else if (rest.rfind("<stdout>:", 0) == 0 || rest.rfind("<stderr>:", 0) == 0) {
    colon_skip = 9;
  } else {
    return false;
  }
  std::size_t digits = inner.size();
  while (digits > 0 && IsDigit(inner[digits - 1])) --digits;
  std::string_view name = inner.substr(0, digits), num = inner.substr(digits);
  if (std::size_t bar = inner.find('|'); bar != std::string_view::npos) {
    name = inner.substr(0, bar);
    num = {};
    std::size_t d = name.size();
    while (d > 0 && IsDigit(name[d - 1])) --d;
    num = name.substr(d);
  }
  if (std::size_t comma = inner.find(','); comma != std::string_view::npos && AllDigits(inner.substr(comma + 1)))
    num = inner.substr(comma + 1);
  if (AllDigits(num)) line.rank = ToInt(num);
  s = rest.substr(colon_skip);
  return true;
}

// srun --label "12: " prefix.
bool TakeTaskLabel(std::string_view& s, LogLine& line) {
  std::size_t i = 0;
  while (i < s.size() && i < 6 && IsDigit(s[i])) ++i;
  if (i == 0 || i + 1 >= s.size() || s[i] != ':' || s[i + 1] != ' ') return false;
  line.rank = ToInt(s.substr(0, i));
  s.remove_prefix(i + 2);
  return true;
}

// 2024-01-02T03:04:05.123Z / 2024-01-02 03:04:05,123 / "09/04/2024 02:49:57 -" / "Jan  2 03:04:05"
bool TakeTimestamp(std::string_view& s) {
  auto digits_at = [&](std::size_t pos, std::size_t n) {
    if (pos + n > s.size()) return false;
    for (std::size_t k = 0; k < n; ++k)
      if (!IsDigit(s[pos + k])) return false;
    return true;
  };
  std::size_t end = 0;
  if (digits_at(0, 4) && s.size() > 10 && s[4] == '-' && digits_at(5, 2) && s[7] == '-' && digits_at(8, 2)) {
    end = 10;
  } else if (digits_at(0, 2) && s.size() > 10 && s[2] == '/' && digits_at(3, 2) && s[5] == '/' && digits_at(6, 4)) {
    end = 10;
  } else {
    return false;
  }
  if (end < s.size() && (s[end] == 'T' || s[end] == ' ') && digits_at(end + 1, 2) && end + 3 < s.size() &&
      s[end + 3] == ':') {
    end += 1;
    while (end < s.size() && (IsDigit(s[end]) || s[end] == ':' || s[end] == '.' || s[end] == ',')) ++end;
    if (end < s.size() && (s[end] == 'Z' || s[end] == '+' || s[end] == '-')) {
      if (s[end] == 'Z') {
        ++end;
      } else if (end + 1 < s.size() && IsDigit(s[end + 1])) {
        ++end;
        while (end < s.size() && (IsDigit(s[end]) || s[end] == ':')) ++end;
      }
    }
  }
  s.remove_prefix(end);
  SkipSpaces(s);
  if (s.rfind("- ", 0) == 0) s.remove_prefix(2);
  return true;
}

// glog / c10d: "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] ", "[W socket.cpp:697] ",
// "E1218 20:27:21.42 123 file.cc:10] ".
bool TakeGlog(std::string_view& s, LogLine& line) {
  std::string_view t = s;
  bool bracket = !t.empty() && t.front() == '[';
  if (bracket) t.remove_prefix(1);
  if (t.size() < 3 || (t[0] != 'E' && t[0] != 'W' && t[0] != 'I' && t[0] != 'F')) return false;
  if (!(IsDigit(t[1]) || (bracket && t[1] == ' '))) return false;
  std::size_t close = t.find(']');
  if (close == std::string_view::npos || close > 80) return false;
  std::string_view inner = t.substr(0, close);
  if (inner.find(':') == std::string_view::npos) return false;  // needs a file:line or time
  line.glog_level = t[0];
  s = t.substr(close + 1);
  SkipSpaces(s);
  return true;
}

// NCCL: "host:pid:tid [dev] " or "[dev] " (NCCL_DEBUG without hostname), then "file:line NCCL WARN " /
// "NCCL INFO ".
void TakeNccl(std::string_view& s, LogLine& line) {
  std::size_t space = s.find(' ');
  if (space != std::string_view::npos && space > 0 && space < 200) {
    std::string_view tok = s.substr(0, space);
    std::size_t c2 = tok.rfind(':');
    std::size_t c1 = c2 == std::string_view::npos || c2 == 0 ? std::string_view::npos : tok.rfind(':', c2 - 1);
    if (c1 != std::string_view::npos && c1 > 0 && AllDigits(tok.substr(c1 + 1, c2 - c1 - 1)) &&
        AllDigits(tok.substr(c2 + 1))) {
      std::string_view rest = s.substr(space + 1);
      if (!rest.empty() && rest.front() == '[') {
        line.host = std::string(tok.substr(0, c1));
        s = rest;
      }
    }
  }
  if (s.size() > 2 && s.front() == '[') {
    std::size_t close = s.find(']');
    if (close != std::string_view::npos && close < 6 && AllDigits(s.substr(1, close - 1)) && close + 1 < s.size() &&
        s[close + 1] == ' ') {
      line.cuda_device = ToInt(s.substr(1, close - 1));
      s.remove_prefix(close + 2);
    }
  }
  std::size_t warn = s.find("NCCL WARN ");
  std::size_t info = s.find("NCCL INFO ");
  std::size_t bare_warn = s.find(" WARN ");  // NCCL < 2.3 printed "init.cu:674 WARN ..."
  if (warn != std::string_view::npos && warn < 80) {
    line.nccl_warn = true;
    line.nccl_file = std::string(Trim(s.substr(0, warn)));
    s.remove_prefix(warn + 10);
  } else if (info != std::string_view::npos && info < 80) {
    line.nccl_info = true;
    s.remove_prefix(info + 10);
  } else if (bare_warn != std::string_view::npos && bare_warn < 40 && line.cuda_device >= 0) {
    line.nccl_warn = true;
    line.nccl_file = std::string(Trim(s.substr(0, bare_warn)));
    s.remove_prefix(bare_warn + 6);
  }
}

void TakeJson(std::string_view& s, LogLine& line, std::string& storage) {
  if (s.size() < 2 || s.front() != '{' || s.back() != '}') return;
  nlohmann::json doc = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  for (const char* key : {"message", "msg", "log", "text", "MESSAGE"}) {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_string()) {
      storage = it->get<std::string>();
      break;
    }
  }
  for (const char* key : {"rank", "global_rank", "RANK"}) {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_number_integer()) line.rank = it->get<int>();
    if (it != doc.end() && it->is_string() && AllDigits(it->get<std::string>())) line.rank = ToInt(it->get<std::string>());
  }
  for (const char* key : {"host", "hostname", "node"}) {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_string()) line.host = it->get<std::string>();
  }
  if (!storage.empty()) s = storage;
}

// Logs pasted through chat tools, word processors and CJK input methods carry typographic quotes,
// full-width punctuation and no-break spaces; the programs printed ASCII. Map them back so the catalog
// and the rules see what was printed (curly quotes around a CUDA error string, a full-width colon).
std::string AsciiPunctuation(std::string_view in) {
  struct Map {
    const char* utf8;
    char ascii;
  };
  static constexpr Map kMap[] = {
      {"\xE2\x80\x98", '\''}, {"\xE2\x80\x99", '\''}, {"\xE2\x80\x9C", '"'}, {"\xE2\x80\x9D", '"'},
      {"\xE2\x80\x93", '-'},  {"\xE2\x80\x94", '-'},  {"\xC2\xA0", ' '},     {"\xE3\x80\x80", ' '},
      {"\xEF\xBC\x9A", ':'},  {"\xEF\xBC\x88", '('},  {"\xEF\xBC\x89", ')'}, {"\xEF\xBC\x8C", ','},
  };
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size();) {
    bool mapped = false;
    if (static_cast<unsigned char>(in[i]) >= 0xC2)
      for (const Map& m : kMap) {
        std::string_view u(m.utf8);
        if (in.compare(i, u.size(), u) == 0) {
          out.push_back(m.ascii);
          i += u.size();
          mapped = true;
          break;
        }
      }
    if (!mapped) out.push_back(in[i++]);
  }
  return out;
}

void Parse(LogLine& line) {
  std::string normalized = AsciiPunctuation(line.raw);
  std::string_view s = normalized;
  std::string json_message;
  SkipSpaces(s);
  TakeJson(s, line, json_message);
  for (int round = 0; round < 4; ++round) {
    SkipSpaces(s);
    bool took = TakeBracketTag(s, line) || TakeTaskLabel(s, line) || TakeTimestamp(s) || TakeGlog(s, line);
    if (!took) break;
  }
  SkipSpaces(s);
  TakeNccl(s, line);
  SkipSpaces(s);
  line.body = std::string(s);
  while (!line.body.empty() && (line.body.back() == ' ' || line.body.back() == '\t')) line.body.pop_back();
}

}  // namespace

std::vector<LogLine> ReadLogLines(std::string_view text, int source, std::size_t max_lines) {
  std::vector<LogLine> lines;
  std::size_t pos = 0;
  int number = 0;
  while (pos < text.size() && lines.size() < max_lines) {
    std::size_t nl = text.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view raw = text.substr(pos, end - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (raw.size() > kMaxExplainLineBytes) raw = raw.substr(0, kMaxExplainLineBytes);
    if (raw.empty()) continue;
    LogLine line;
    line.number = number;
    line.source = source;
    line.raw = std::string(raw);
    for (char& c : line.raw)
      if (c == '\0') c = ' ';
    Parse(line);
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace commkit::diagnostics::explain
