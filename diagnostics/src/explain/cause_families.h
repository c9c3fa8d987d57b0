// Cause families: for each id shared with the labelled corpus, the fix, what to run to confirm and
// where the cause -> fix mapping comes from (documentation or a settled public thread).
#pragma once

#include <string_view>

namespace commkit::diagnostics::explain {

struct Family {
  const char* id;
  const char* fix;
  const char* confirm;
  const char* basis;
};

// nullptr for an unknown id.
const Family* FindFamily(std::string_view id);

}  // namespace commkit::diagnostics::explain
