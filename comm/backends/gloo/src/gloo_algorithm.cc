// The gloo backend's all-reduce algorithm choice: COMMKIT_GLOO_ALGORITHM and the measured `auto` table.
#include <optional>
#include <string>

#include "commkit/common/env.h"
#include "gloo_internal.h"

namespace commkit::comm::gloo {

namespace {

// The `auto` table: which algorithm for an all-reduce of `bytes` over `ranks` ranks. Halving-doubling
// up to a per-rank-count size, the new-style ring above it; bcube is never chosen (it did not beat
// ring consistently anywhere). From scripts/gloo-algorithm-sweep.py on the 2-core development machine,
// 2026-11-22, 2-4 ranks as processes, 16 B..64 MiB, three repeats (docs/gloo-algorithms.md has the
// table): halving-doubling took 0.12-0.33x ring's time at 2 ranks up to 1 MiB and 0.17-0.73x at 4
// ranks up to 256 KiB (below 1 in every repeat at 2 ranks); at 16-64 MiB ring was 1.3-3.3x faster.
// Non-power-of-two rank counts always use ring: at 3 ranks halving-doubling's gains were inconsistent
// between repeats, and once a large ring all-reduce had run in the same job, 16 B-64 KiB
// halving-doubling calls took 13-19 ms against ring's 4-8 ms (a mixed-size sweep, same day).
// Power-of-two counts beyond 4 (not measured) take the 4-rank limit.
struct AutoLimit {
  int ranks;
  std::size_t max_halving_doubling_bytes;
};
constexpr AutoLimit kAutoLimits[] = {{2, std::size_t{1} << 20}, {4, std::size_t{256} << 10}};

}  // namespace

std::string_view ToString(GlooAlgorithm a) {
  switch (a) {
    case GlooAlgorithm::kRing: return "ring";
    case GlooAlgorithm::kHalvingDoubling: return "halving_doubling";
    case GlooAlgorithm::kBcube: return "bcube";
  }
  return "?";
}

Result<GlooAlgorithmChoice> GlooAlgorithmFromEnv() {
  std::optional<std::string> v;
  COMMKIT_ASSIGN_OR_RETURN(v, EnvChoice("COMMKIT_GLOO_ALGORITHM", {"auto", "ring", "halving_doubling", "bcube"}));
  GlooAlgorithmChoice c;
  if (!v || *v == "auto") return c;
  c.automatic = false;
  c.forced = *v == "ring" ? GlooAlgorithm::kRing
             : *v == "bcube" ? GlooAlgorithm::kBcube
                             : GlooAlgorithm::kHalvingDoubling;
  return c;
}

std::size_t AutoHalvingDoublingLimit(int ranks) {
  if (ranks < 2 || (ranks & (ranks - 1)) != 0) return 0;
  for (const AutoLimit& l : kAutoLimits)
    if (l.ranks == ranks) return l.max_halving_doubling_bytes;
  return kAutoLimits[1].max_halving_doubling_bytes;
}

GlooAlgorithm AutoGlooAlgorithm(std::size_t bytes, int ranks) {
  return bytes <= AutoHalvingDoublingLimit(ranks) ? GlooAlgorithm::kHalvingDoubling : GlooAlgorithm::kRing;
}

}  // namespace commkit::comm::gloo
