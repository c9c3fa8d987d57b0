// Names of the collective algorithms (collective_algorithm.h).
#include "commkit/common/collective_algorithm.h"

#include <string>
#include <vector>

#include "commkit/common/escape.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

constexpr std::array<std::string_view, kNumCollectiveAlgorithms> kNames = {
    "flat",  "sliced",  "ring",          "recursive_doubling", "halving_doubling", "hierarchical",
    "bcube", "library", "binomial_tree", "dissemination",      "pairwise",         "direct",
    "single_copy"};

constexpr bool InEnumeratorOrder() {
  for (std::size_t i = 0; i < kCollectiveAlgorithms.size(); ++i)
    if (static_cast<std::size_t>(kCollectiveAlgorithms[i]) != i) return false;
  return true;
}
static_assert(InEnumeratorOrder() &&
                  static_cast<std::size_t>(CollectiveAlgorithm::kSingleCopy) + 1 == kNumCollectiveAlgorithms,
              "kCollectiveAlgorithms lists every enumerator once, in order");

// A name in an error is user text: at most this many bytes of it are shown.
constexpr std::size_t kMaxShownBytes = 60;

}  // namespace

std::string_view ToString(CollectiveAlgorithm algorithm) {
  const auto i = static_cast<std::size_t>(algorithm);
  return i < kNames.size() ? kNames[i] : std::string_view("?");
}

Result<CollectiveAlgorithm> ParseCollectiveAlgorithm(std::string_view name) {
  const std::string lower = ToLower(Trim(name));
  for (CollectiveAlgorithm a : kCollectiveAlgorithms)
    if (ToString(a) == lower) return a;
  std::vector<std::string> known(kNames.begin(), kNames.end());
  return Status::InvalidArgument(StrCat("unknown algorithm '", EscapeControl(name.substr(0, kMaxShownBytes), false),
                                        name.size() > kMaxShownBytes ? "..." : "", "' (known: ", Join(known, ", "),
                                        ")"));
}

}  // namespace commkit
