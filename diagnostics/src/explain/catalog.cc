#include "catalog.h"

#include <algorithm>
#include <cstring>

namespace commkit::diagnostics::explain {

// Defined in the file generated from diagnostics/data/message_catalog.tsv at build time.
extern const unsigned char kMessageCatalogData[];
extern const std::size_t kMessageCatalogSize;

namespace {

constexpr std::size_t kMinAnchor = 6;  // shorter literals ("%s: %d") would match everything
constexpr int kMaxTries = 4;           // occurrences of one literal tried before giving up

std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      out.push_back(n == 't' ? '\t' : n == 'n' ? '\n' : n);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string_view> SplitTabs(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t pos = 0;
  while (true) {
    std::size_t tab = line.find('\t', pos);
    cells.push_back(line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos));
    if (tab == std::string_view::npos) break;
    pos = tab + 1;
  }
  return cells;
}

// printf format -> literal pieces and typed captures. Newlines inside a format become spaces (the
// message is matched line by line); "%%" is a literal '%'.
std::vector<CatalogEntry::Piece> Compile(std::string_view fmt) {
  std::vector<CatalogEntry::Piece> pieces;
  std::string lit;
  auto flush = [&] {
    if (!lit.empty()) pieces.push_back({true, CaptureType::kString, lit});
    lit.clear();
  };
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '\n' || c == '\t') c = ' ';
    if (c != '%') {
      lit.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      lit.push_back('%');
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < fmt.size() && std::strchr("-+ #0123456789.*", fmt[j]) != nullptr) ++j;
    while (j < fmt.size() && std::strchr("hlLzjtq", fmt[j]) != nullptr) ++j;
    if (j >= fmt.size()) break;
    CaptureType type = CaptureType::kString;
    switch (fmt[j]) {
      case 'd': case 'i': case 'u': type = CaptureType::kInt; break;
      case 'x': case 'X': case 'p': case 'o': type = CaptureType::kHex; break;
      case 'f': case 'g': case 'e': case 'G': case 'E': type = CaptureType::kFloat; break;
      case 'c': type = CaptureType::kChar; break;
      default: type = CaptureType::kString; break;
    }
    flush();
    pieces.push_back({false, type, {}});
    i = j;
  }
  flush();
  // Trim the message's own leading/trailing blanks: prefixes and line ends vary.
  if (!pieces.empty() && pieces.front().literal) {
    std::string& t = pieces.front().text;
    t.erase(0, t.find_first_not_of(' '));
    if (t.empty()) pieces.erase(pieces.begin());
  }
  if (!pieces.empty() && pieces.back().literal) {
    std::string& t = pieces.back().text;
    t.erase(t.find_last_not_of(' ') + 1);
    if (t.empty()) pieces.pop_back();
  }
  return pieces;
}

bool Valid(CaptureType type, std::string_view v) {
  auto all = [&](const char* set) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [&](char c) { return std::strchr(set, c) != nullptr; });
  };
  switch (type) {
    case CaptureType::kInt: return all("-0123456789");
    case CaptureType::kHex: return all("0123456789abcdefABCDEFx(nil)");
    case CaptureType::kFloat: return all("-+0123456789.eEinfa");
    case CaptureType::kChar: return v.size() == 1;
    case CaptureType::kString: return true;
  }
  return true;
}

// Assigns the text between two literals to the pending captures: all to the first when there are
// several in a row (printf gives no boundary between "%s%s").
bool Assign(const std::vector<CaptureType>& pending, std::string_view text, std::vector<std::string>* out) {
  if (pending.empty()) return text.empty();
  if (pending.size() == 1) {
    if (!Valid(pending[0], text)) return false;
  } else if (pending[0] != CaptureType::kString && !Valid(pending[0], text)) {
    return false;
  }
  if (out != nullptr) {
    out->emplace_back(text);
    for (std::size_t k = 1; k < pending.size(); ++k) out->emplace_back();
  }
  return true;
}

std::uint32_t Key(const char* p) {
  std::uint32_t k;
  std::memcpy(&k, p, 4);
  return k;
}

}  // namespace

MessageCatalog::MessageCatalog(std::string_view tsv) : first2_(65536 / 64, 0) {
  std::size_t pos = 0;
  while (pos < tsv.size()) {
    std::size_t nl = tsv.find('\n', pos);
    std::string_view line = tsv.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? tsv.size() : nl + 1;
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (line.rfind("# source ", 0) == 0) source_notes_.emplace_back(line.substr(9));
      continue;
    }
    std::vector<std::string_view> c = SplitTabs(line);
    if (c.size() < 8) continue;
    CatalogEntry e;
    e.id = std::string(c[0]);
    e.source = std::string(c[1]);
    e.level = std::string(c[2]);
    e.topic = std::string(c[3]);
    e.versions = std::string(c[4]);
    e.files = std::string(c[5]);
    e.result = std::string(c[6]);
    e.format = Unescape(c[7]);
    e.pieces = Compile(e.format);
    std::size_t best = 0;
    bool found = false;
    for (std::size_t k = 0; k < e.pieces.size(); ++k) {
      if (!e.pieces[k].literal) continue;
      e.literal_bytes += e.pieces[k].text.size();
      if (!found || e.pieces[k].text.size() > e.pieces[best].text.size()) best = k;
      found = true;
    }
    if (!found || e.pieces[best].text.size() < kMinAnchor) continue;
    e.anchor = best;
    entries_.push_back(std::move(e));
  }
  // Index each entry under the rarest 4-byte window of its anchor, so common prefixes ("NET/IB : ")
  // do not make one bucket hold hundreds of entries.
  std::unordered_map<std::uint32_t, int> freq;
  for (const CatalogEntry& e : entries_) {
    const std::string& a = e.pieces[e.anchor].text;
    for (std::size_t i = 0; i + 4 <= a.size(); ++i) ++freq[Key(a.data() + i)];
  }
  for (std::uint32_t idx = 0; idx < entries_.size(); ++idx) {
    CatalogEntry& e = entries_[idx];
    const std::string& a = e.pieces[e.anchor].text;
    std::size_t best = 0;
    for (std::size_t i = 1; i + 4 <= a.size(); ++i)
      if (freq[Key(a.data() + i)] < freq[Key(a.data() + best)]) best = i;
    std::uint32_t key = Key(a.data() + best);
    index_[key].push_back(idx);
    unsigned first2 = static_cast<unsigned char>(a[best]) | (static_cast<unsigned char>(a[best + 1]) << 8);
    first2_[first2 / 64] |= std::uint64_t{1} << (first2 % 64);
    key_offset_.push_back(static_cast<std::uint16_t>(std::min<std::size_t>(best, 65535)));
  }
}

const MessageCatalog& MessageCatalog::Get() {
  static const MessageCatalog catalog(
      std::string_view(reinterpret_cast<const char*>(kMessageCatalogData), kMessageCatalogSize));
  return catalog;
}

bool MessageCatalog::MatchEntry(const CatalogEntry& e, std::string_view body, std::size_t anchor_pos,
                                std::vector<std::string>* captures) const {
  // Right of the anchor: literals searched forward, captures take what lies between.
  std::vector<std::string> right, left;
  std::vector<std::string>* rout = captures != nullptr ? &right : nullptr;
  std::size_t pos = anchor_pos + e.pieces[e.anchor].text.size();
  std::vector<CaptureType> pending;
  for (std::size_t k = e.anchor + 1; k < e.pieces.size(); ++k) {
    const CatalogEntry::Piece& p = e.pieces[k];
    if (!p.literal) {
      pending.push_back(p.type);
      continue;
    }
    std::size_t from = pos;
    bool ok = false;
    for (int tries = 0; tries < kMaxTries; ++tries) {
      std::size_t at = body.find(p.text, from);
      if (at == std::string_view::npos) break;
      if (Assign(pending, body.substr(pos, at - pos), rout)) {
        pos = at + p.text.size();
        ok = true;
        break;
      }
      if (pending.empty()) break;  // literal must follow immediately
      from = at + 1;
    }
    if (!ok) return false;
    pending.clear();
  }
  if (!pending.empty()) {
    std::string_view rest = body.substr(pos);
    std::size_t n = 0;
    if (pending.size() == 1 && pending[0] == CaptureType::kString) {
      n = rest.size();
    } else {
      while (n < rest.size() && rest[n] != ' ' && rest[n] != ',' && rest[n] != ')') ++n;
    }
    if (!Assign(pending, rest.substr(0, n), rout)) return false;
  }
  // Left of the anchor, backwards.
  std::size_t end = anchor_pos;  // text [.., end) not yet consumed
  pending.clear();
  std::vector<std::string> left_rev;
  for (std::size_t k = e.anchor; k-- > 0;) {
    const CatalogEntry::Piece& p = e.pieces[k];
    if (!p.literal) {
      pending.insert(pending.begin(), p.type);
      continue;
    }
    std::size_t upto = end;
    bool ok = false;
    for (int tries = 0; tries < kMaxTries && upto >= p.text.size(); ++tries) {
      std::size_t at = body.rfind(p.text, upto - p.text.size());
      if (at == std::string_view::npos || at + p.text.size() > end) break;
      std::vector<std::string> tmp;
      if (Assign(pending, body.substr(at + p.text.size(), end - at - p.text.size()), &tmp)) {
        for (std::size_t t = tmp.size(); t-- > 0;) left_rev.push_back(std::move(tmp[t]));
        end = at;
        ok = true;
        break;
      }
      if (pending.empty() || at == 0) break;
      upto = at + p.text.size() - 1;
    }
    if (!ok) return false;
    pending.clear();
  }
  if (!pending.empty()) {
    std::size_t start = end;
    if (pending.size() == 1 && pending[0] != CaptureType::kString) {
      while (start > 0 && body[start - 1] != ' ' && body[start - 1] != '(' && body[start - 1] != '[') --start;
    } else {
      while (start > 0 && body[start - 1] != ' ') --start;
    }
    std::vector<std::string> tmp;
    if (!Assign(pending, body.substr(start, end - start), &tmp)) return false;
    for (std::size_t t = tmp.size(); t-- > 0;) left_rev.push_back(std::move(tmp[t]));
  }
  if (captures != nullptr) {
    captures->assign(left_rev.rbegin(), left_rev.rend());
    for (std::string& r : right) captures->push_back(std::move(r));
  }
  return true;
}

CatalogMatch MessageCatalog::Match(std::string_view body) const {
  CatalogMatch best;
  if (body.size() < 4) return best;
  std::size_t best_bytes = 0;
  for (std::size_t i = 0; i + 4 <= body.size(); ++i) {
    unsigned first2 = static_cast<unsigned char>(body[i]) | (static_cast<unsigned char>(body[i + 1]) << 8);
    if ((first2_[first2 / 64] & (std::uint64_t{1} << (first2 % 64))) == 0) continue;
    auto it = index_.find(Key(body.data() + i));
    if (it == index_.end()) continue;
    for (std::uint32_t idx : it->second) {
      const CatalogEntry& e = entries_[idx];
      if (e.literal_bytes <= best_bytes) continue;
      std::size_t off = key_offset_[idx];
      if (off > i) continue;
      std::size_t start = i - off;
      const std::string& a = e.pieces[e.anchor].text;
      if (body.compare(start, a.size(), a) != 0) continue;
      if (!MatchEntry(e, body, start, nullptr)) continue;
      best.entry = &e;
      best_bytes = e.literal_bytes;
    }
  }
  if (best.entry != nullptr) {
    // Re-run the winner to collect its captures (at the first position its anchor matches).
    const std::string& a = best.entry->pieces[best.entry->anchor].text;
    for (std::size_t at = body.find(a); at != std::string_view::npos; at = body.find(a, at + 1))
      if (MatchEntry(*best.entry, body, at, &best.captures)) break;
  }
  return best;
}

}  // namespace commkit::diagnostics::explain
