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

// Whether a log line can prove the family (a high-confidence claim): the message names the cause itself
// (ENOSPC on /dev/shm, "Duplicate GPU detected", EADDRINUSE on the store port). Families whose message is
// a symptom of something elsewhere (a rendezvous or collective timeout, a closed peer, a completion
// error, a fault NCCL only reports) or a usual cause behind a generic failure never are.
bool Provable(std::string_view id);

}  // namespace commkit::diagnostics::explain
