#include "commkit/common/text.h"

#include <algorithm>

namespace commkit {

bool GlobMatch(std::string_view p, std::string_view t) {
  // Backtracking to the last '*' only: at worst quadratic, never exponential on hostile patterns.
  std::size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

int LineOfOffset(std::string_view text, std::ptrdiff_t offset) {
  if (offset < 0) return 0;
  const std::size_t end = std::min(text.size(), static_cast<std::size_t>(offset));
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
}

}  // namespace commkit
