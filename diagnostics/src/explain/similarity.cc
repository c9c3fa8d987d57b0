#include "similarity.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cause_families.h"
#include "facts.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics::explain {

extern const unsigned char kSimilarityModelData[];
extern const std::size_t kSimilarityModelSize;

namespace {

// Below this a best match was as often wrong as right in leave-one-out runs over the tuning excerpts.
constexpr double kMinScore = 2.0;
// Enough to fill the evidence list; later lines rarely change a ranking and a 10 MB log stays fast.
constexpr std::size_t kMaxLines = 20000;

struct Model {
  std::unordered_map<std::string, double> idf;
  // token -> (family index, centroid weight)
  std::unordered_map<std::string, std::vector<std::pair<int, double>>> weights;
  std::vector<std::string> families;
};

const Model& TheModel() {
  static const Model model = [] {
    Model m;
    std::map<std::string, int> family_index;
    std::string_view data(reinterpret_cast<const char*>(kSimilarityModelData), kSimilarityModelSize);
    for (const std::string& line : Split(data, '\n', /*skip_empty=*/true)) {
      if (line.front() == '#') continue;
      std::vector<std::string> f = Split(line, '\t');
      if (f.size() == 3 && f[0] == "idf") {
        m.idf[f[1]] = ParseDouble(f[2]).value_or(0);
      } else if (f.size() == 4 && f[0] == "w") {
        auto [it, added] = family_index.emplace(f[1], static_cast<int>(m.families.size()));
        if (added) m.families.push_back(f[1]);
        m.weights[f[2]].emplace_back(it->second, ParseDouble(f[3]).value_or(0));
      }
    }
    return m;
  }();
  return model;
}

// The generator's tokens: [A-Za-z_][A-Za-z0-9_]{2,}, lower-cased, without stop words, tokens that start
// with '_', hex strings of 6+ characters and words with 3+ digits.
template <typename F>
void ForEachToken(std::string_view text, F f) {
  static const std::set<std::string, std::less<>> kStop = {"the", "and", "for", "from", "with", "was",
                                                           "this", "that", "not", "are"};
  std::size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (!(std::isalpha(c) || c == '_')) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
    std::string_view word = text.substr(i, j - i);
    i = j;
    if (word.size() < 3 || word.front() == '_') continue;
    std::string t = ToLower(word);
    if (kStop.count(t) != 0) continue;
    if (t.size() >= 6 && std::all_of(t.begin(), t.end(), [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); }))
      continue;
    if (std::count_if(t.begin(), t.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }) >= 3) continue;
    f(std::move(t));
  }
}

}  // namespace

std::optional<Diagnosis> Resemblance(const RuleContext& ctx) {
  const Model& model = TheModel();
  // A log without a failure in it (an `ulimit -a`, a bookkeeping event) resembles nothing. Envelopes
  // ("unhandled system error") count here: they are never the first error, but they say one happened.
  if (model.families.empty() ||
      std::none_of(ctx.messages.begin(), ctx.messages.end(), [](const Message& m) { return LooksLikeError(m); }))
    return std::nullopt;
  // The tokens of the log (each once) and the first line that has each.
  std::unordered_map<std::string, std::size_t> first_line;
  for (std::size_t k = 0; k < ctx.messages.size() && k < kMaxLines; ++k) {
    ForEachToken(ctx.messages[k].line->raw, [&](std::string t) {
      if (model.idf.count(t) != 0) first_line.emplace(std::move(t), k);
    });
  }
  std::vector<double> score(model.families.size(), 0.0);
  for (const auto& [t, k] : first_line) {
    auto w = model.weights.find(t);
    if (w == model.weights.end()) continue;
    const double idf = model.idf.at(t);
    for (const auto& [f, v] : w->second) score[static_cast<std::size_t>(f)] += idf * v;
  }
  const auto best = static_cast<std::size_t>(std::max_element(score.begin(), score.end()) - score.begin());
  if (score[best] < kMinScore) return std::nullopt;
  const std::string& family = model.families[best];

  // The shared words that weigh most, and the lines they come from.
  std::vector<std::pair<double, std::string>> shared;
  for (const auto& [t, k] : first_line) {
    auto w = model.weights.find(t);
    if (w == model.weights.end()) continue;
    for (const auto& [f, v] : w->second)
      if (static_cast<std::size_t>(f) == best) shared.emplace_back(model.idf.at(t) * v, t);
  }
  std::sort(shared.begin(), shared.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (shared.size() > 6) shared.resize(6);
  Diagnosis d;
  d.signature = family;
  d.score = 15;
  d.confidence = Confidence::kLow;
  std::vector<std::string> words;
  std::set<std::size_t> lines;
  for (const auto& [v, t] : shared) {
    words.push_back(t);
    if (lines.size() < 3) lines.insert(first_line.at(t));
  }
  d.cause = StrCat("no rule recognises this log; its wording resembles known ", family,
                   " failures most (shared words: ", Join(words, ", "), "), which proves nothing on its own");
  for (std::size_t k : lines) d.evidence.push_back(Evidence(ctx.messages[k], ctx.names));
  if (const Family* f = FindFamily(family)) {
    d.fix = f->fix;
    d.confirm = f->confirm;
  }
  d.basis = "resemblance to the explain corpus's labelled excerpts (scripts/gen_explain_similarity.py)";
  return d;
}

}  // namespace commkit::diagnostics::explain
