#include "commkit/comm/store.h"

#include <thread>

#include "commkit/common/strings.h"
#include "poll_wait.h"

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

Status PollForKeys(std::string_view describe, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                   const std::function<Result<std::vector<std::string>>(const std::vector<std::string>&)>& missing) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::vector<std::string> pending = keys;
  while (true) {
    COMMKIT_ASSIGN_OR_RETURN(pending, missing(pending));
    if (pending.empty()) return Status::Ok();
    if (Clock::now() >= deadline) return StoreWaitTimeout(describe, pending, keys.size(), timeout);
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace commkit
