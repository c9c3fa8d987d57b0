// Text helpers for selectors and parsers: glob matching (check ids, ld.so.conf include patterns) and
// line numbers for parser offsets (XML/JSON errors as "file:line").
#pragma once

#include <cstddef>
#include <string_view>

namespace commkit {

// Glob match with * and ? (fnmatch-style without character classes or escapes: '[' is literal).
bool GlobMatch(std::string_view pattern, std::string_view text);

// The 1-based line of `text` holding byte `offset` (offsets past the end count as the last line), 0
// for a negative offset.
int LineOfOffset(std::string_view text, std::ptrdiff_t offset);

}  // namespace commkit
