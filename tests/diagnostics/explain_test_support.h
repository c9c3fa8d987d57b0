// What the explain tests share.
#pragma once

#include <string>

#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics {

// The best candidate's family, or "none".
inline std::string Claim(const Explanation& ex) { return ex.Best() == nullptr ? "none" : ex.Best()->signature; }

// The best candidate's family when it is claimed with high confidence, else the family and its
// confidence ("ib.memlock (medium)") or "none": one comparison checks both, and no null is dereferenced.
inline std::string HighClaim(const Explanation& ex) {
  const Diagnosis* best = ex.Best();
  if (best == nullptr) return "none";
  if (best->confidence == Confidence::kHigh) return best->signature;
  return best->signature + " (" + ToString(best->confidence) + ")";
}

// Whether any candidate, not only the best, is the family `id`.
inline bool Mentions(const Explanation& ex, const std::string& id) {
  for (const Diagnosis& d : ex.diagnoses)
    if (d.signature == id) return true;
  return false;
}

}  // namespace commkit::diagnostics
