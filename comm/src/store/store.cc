#include "commkit/comm/store.h"

#include "commkit/common/strings.h"

namespace commkit {

Status StoreWaitTimeout(std::string_view describe, const std::vector<std::string>& missing, std::size_t total_keys,
                        std::chrono::milliseconds waited) {
  constexpr std::size_t kShown = 16;
  std::vector<std::string> shown(missing.begin(), missing.begin() + std::min(missing.size(), kShown));
  std::string list = Join(shown, ", ");
  if (missing.size() > kShown) list += StrCat(", ... ", missing.size() - kShown, " more");
  return Status::Timeout(StrCat(describe, ": wait timed out after ", HumanSeconds(waited.count() / 1000.0),
                                ": keys still missing: [", list, "] (", missing.size(), " of ", total_keys,
                                " keys)"));
}

}  // namespace commkit
