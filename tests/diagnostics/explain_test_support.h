// What the explain tests share.
#pragma once

#include <string>

#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics {

// The best candidate's family, or "none".
inline std::string Claim(const Explanation& ex) { return ex.Best() == nullptr ? "none" : ex.Best()->signature; }

}  // namespace commkit::diagnostics
