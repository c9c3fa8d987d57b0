// The COMMKIT_TUNE grammar (tuning.h, docs/tuning.md): names, sizes, items and their errors.
#include <algorithm>
#include <array>
#include <cctype>

#include "commkit/comm/tuning.h"
#include "commkit/common/strings.h"

namespace commkit::tune {

namespace {

constexpr std::array<std::string_view, 3> kBackends = {"host", "gloo", "mpi"};
// A spec longer than this is refused before it is split (an environment value, not a file).
constexpr std::size_t kMaxSpecBytes = 16 << 10;
constexpr std::size_t kMaxItems = 256;

// What a user writes next to each error.
constexpr std::string_view kHelp =
    "write items as [backend.]collective[@host|device]:LO-[HI]:algorithm[:segment=SIZE][:between=ALGO]"
    "[:ranks=N[-M]][:nodes=N[-M]][:ppn=N[-M]], separated by commas (docs/tuning.md), or unset the variable";

std::string Names(const auto& names) {
  std::vector<std::string> out(names.begin(), names.end());
  return Join(out, ", ");
}

// The printable form of a piece of user text in an error: at most 60 characters, control bytes escaped.
std::string Shown(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 60)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  if (text.size() > 60) out += "...";
  return out;
}

std::optional<CollectiveKind> ParseCollective(std::string_view name) {
  const std::string n = ToLower(name);
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (ToString(kind) == n) return kind;
  }
  return std::nullopt;
}

std::vector<std::string> CollectiveNames() {
  std::vector<std::string> out;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv) out.emplace_back(ToString(kind));
  }
  return out;
}

std::optional<CountRange> ParseCount(std::string_view text) {
  text = Trim(text);
  CountRange r;
  const auto dash = text.find('-');
  auto one = [](std::string_view t) -> std::optional<int> {
    auto v = ParseInt(Trim(t));
    if (!v || *v < 1 || *v > (1 << 24)) return std::nullopt;
    return static_cast<int>(*v);
  };
  if (dash == std::string_view::npos) {
    auto v = one(text);
    if (!v) return std::nullopt;
    r.min = r.max = *v;
    return r;
  }
  auto lo = one(text.substr(0, dash));
  if (!lo) return std::nullopt;
  r.min = *lo;
  const std::string_view hi = Trim(text.substr(dash + 1));
  if (!hi.empty()) {
    auto h = one(hi);
    if (!h || *h < *lo) return std::nullopt;
    r.max = *h;
  }
  return r;
}

std::string FormatBytes(std::size_t b) {
  if (b != 0 && b % (std::size_t{1} << 30) == 0) return StrCat(b >> 30, "G");
  if (b != 0 && b % (std::size_t{1} << 20) == 0) return StrCat(b >> 20, "M");
  if (b != 0 && b % (std::size_t{1} << 10) == 0) return StrCat(b >> 10, "K");
  return StrCat(b);
}

std::string FormatCount(std::string_view key, const CountRange& r) {
  if (r == CountRange{}) return "";
  if (r.min == r.max) return StrCat(":", key, "=", r.min);
  return StrCat(":", key, "=", r.min, "-", r.max == INT_MAX ? std::string() : StrCat(r.max));
}

// One item; `where` says "COMMKIT_TUNE item 3 'text' (at character 41)" for errors.
Result<Rule> ParseItem(std::string_view item, const std::string& where) {
  auto fail = [&](const std::string& what) {
    return Status::InvalidArgument(StrCat(where, ": ", what, "; ", kHelp));
  };
  std::vector<std::string> fields = Split(item, ':');
  for (auto& f : fields) f = std::string(Trim(f));
  if (fields.size() < 3)
    return fail(StrCat("expected at least target:range:algorithm, got ", fields.size(), " field",
                       fields.size() == 1 ? "" : "s"));
  Rule rule;
  rule.source = Source::kEnv;

  // target
  std::string_view target = fields[0];
  if (const auto at = target.find('@'); at != std::string_view::npos) {
    const std::string mem = ToLower(Trim(target.substr(at + 1)));
    if (mem == "host") {
      rule.memory = MemoryKind::kHost;
    } else if (mem == "device") {
      rule.memory = MemoryKind::kDevice;
    } else {
      return fail(StrCat("unknown memory kind '", Shown(mem), "' (known: host, device)"));
    }
    target = Trim(target.substr(0, at));
  }
  if (const auto dot = target.find('.'); dot != std::string_view::npos) {
    rule.backend = ToLower(Trim(target.substr(0, dot)));
    if (std::find(kBackends.begin(), kBackends.end(), rule.backend) == kBackends.end())
      return fail(StrCat("unknown backend '", Shown(rule.backend), "' (tunable backends: ", Names(kBackends), ")"));
    target = Trim(target.substr(dot + 1));
  }
  auto collective = ParseCollective(target);
  if (!collective || *collective == CollectiveKind::kSend || *collective == CollectiveKind::kRecv)
    return fail(StrCat("unknown collective '", Shown(target), "' (known: ", Join(CollectiveNames(), ", "), ")"));
  rule.collective = *collective;

  // range
  const std::string& range = fields[1];
  if (range != "*") {
    const auto dash = range.find('-');
    if (dash == std::string::npos)
      return fail(StrCat("size range '", Shown(range), "' needs a '-' (\"0-64K\", \"64K-\", or \"*\" for every size)"));
    auto lo = ParseBytes(Trim(std::string_view(range).substr(0, dash)));
    if (!lo) return fail(StrCat("size '", Shown(range.substr(0, dash)), "' is not a byte count (\"4096\", \"64K\", \"1M\")"));
    rule.min_bytes = *lo;
    const std::string_view hi_text = Trim(std::string_view(range).substr(dash + 1));
    if (!hi_text.empty()) {
      auto hi = ParseBytes(hi_text);
      if (!hi) return fail(StrCat("size '", Shown(hi_text), "' is not a byte count (\"4096\", \"64K\", \"1M\")"));
      if (*hi <= *lo)
        return fail(StrCat("empty size range '", Shown(range), "': the end is exclusive and must be above the start"));
      rule.max_bytes = *hi;
    }
  }

  // algorithm
  auto algorithm = ParseCollectiveAlgorithm(fields[2]);
  if (!algorithm.ok()) return fail(algorithm.status().message());
  rule.algorithm = *algorithm;

  // params
  for (std::size_t i = 3; i < fields.size(); ++i) {
    const std::string& p = fields[i];
    const auto eq = p.find('=');
    if (eq == std::string::npos)
      return fail(StrCat("parameter '", Shown(p), "' needs key=value (segment, between, ranks, nodes, ppn)"));
    const std::string key = ToLower(Trim(std::string_view(p).substr(0, eq)));
    const std::string_view value = Trim(std::string_view(p).substr(eq + 1));
    if (key == "segment") {
      auto b = ParseBytes(value);
      if (!b || *b == 0) return fail(StrCat("segment='", Shown(value), "' is not a positive byte count (\"256K\")"));
      rule.params.segment_bytes = *b;
    } else if (key == "between") {
      auto a = ParseCollectiveAlgorithm(value);
      if (!a.ok() || (*a != CollectiveAlgorithm::kRing && *a != CollectiveAlgorithm::kHalvingDoubling))
        return fail(StrCat("between='", Shown(value), "' must be ring or halving_doubling"));
      rule.params.between = *a;
    } else if (key == "ranks" || key == "nodes" || key == "ppn") {
      auto r = ParseCount(value);
      if (!r) return fail(StrCat(key, "='", Shown(value), "' is not a count or count range (\"2\", \"4-8\", \"4-\")"));
      (key == "ranks" ? rule.ranks : key == "nodes" ? rule.nodes : rule.ranks_per_node) = *r;
    } else {
      return fail(StrCat("unknown parameter '", Shown(key), "' (known: segment, between, ranks, nodes, ppn)"));
    }
  }
  return rule;
}

}  // namespace

std::string_view ToString(Source source) {
  switch (source) {
    case Source::kDefault: return "default";
    case Source::kTopology: return "topology";
    case Source::kCalibration: return "calibration";
    case Source::kEnv: return "env";
  }
  return "?";
}

std::optional<std::size_t> ParseBytes(std::string_view text) {
  text = Trim(text);
  std::size_t i = 0;
  std::size_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const std::size_t d = static_cast<std::size_t>(text[i] - '0');
    if (value > (kNoLimit - d) / 10) return std::nullopt;
    value = value * 10 + d;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string suffix = ToLower(text.substr(i));
  if (suffix.size() >= 1 && suffix.back() == 'b') suffix.pop_back();
  if (suffix.size() == 2 && suffix[1] == 'i') suffix.pop_back();
  int shift = 0;
  if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (shift > 0 && value > (kNoLimit >> shift)) return std::nullopt;
  return value << shift;
}

Result<std::vector<Rule>> ParseSpec(std::string_view text, std::string_view origin) {
  std::vector<Rule> rules;
  if (text.size() > kMaxSpecBytes)
    return Status::InvalidArgument(StrCat(origin, " is ", text.size(), " bytes long, more than the ", kMaxSpecBytes,
                                          " a tuning spec may have; shorten it (", kHelp, ")"));
  std::size_t start = 0;
  int index = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    const std::string_view item = Trim(raw);
    if (!item.empty()) {
      const std::size_t at = start + static_cast<std::size_t>(item.data() - raw.data());
      ++index;
      if (rules.size() >= kMaxItems)
        return Status::InvalidArgument(StrCat(origin, " has more than ", kMaxItems, " items; merge ranges (", kHelp, ")"));
      const std::string where = StrCat(origin, " item ", index, " '", Shown(item), "' (at character ", at + 1, ")");
      COMMKIT_ASSIGN_OR_RETURN(Rule rule, ParseItem(item, where));
      rule.why = StrCat(origin, " item ", index, " '", std::string(item), "'");
      rules.push_back(std::move(rule));
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  return rules;
}

std::string FormatRule(const Rule& rule) {
  std::string out;
  if (!rule.backend.empty()) out += StrCat(rule.backend, ".");
  out += ToString(rule.collective);
  if (rule.memory) out += StrCat("@", ToString(*rule.memory));
  if (rule.min_bytes == 0 && rule.max_bytes == kNoLimit) {
    out += ":*";
  } else {
    out += StrCat(":", FormatBytes(rule.min_bytes), "-", rule.max_bytes == kNoLimit ? "" : FormatBytes(rule.max_bytes));
  }
  out += StrCat(":", ToString(rule.algorithm));
  if (rule.params.segment_bytes) out += StrCat(":segment=", FormatBytes(rule.params.segment_bytes));
  if (rule.params.between) out += StrCat(":between=", ToString(*rule.params.between));
  out += FormatCount("ranks", rule.ranks) + FormatCount("nodes", rule.nodes) + FormatCount("ppn", rule.ranks_per_node);
  return out;
}

}  // namespace commkit::tune
