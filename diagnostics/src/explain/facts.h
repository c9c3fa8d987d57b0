// Facts from a parsed log: versions, the variables NCCL echoes, interfaces, IB devices / link layer /
// GIDs, errnos, hosts and ranks, per-rank process-group progress, and the first real error line.
#pragma once

#include <string>
#include <vector>

#include "catalog.h"
#include "commkit/diagnostics/explain.h"
#include "log_line.h"

namespace commkit::diagnostics::explain {

// A line together with its catalog match and lower-cased body (what the cause rules look at).
struct Message {
  const LogLine* line = nullptr;
  CatalogMatch match;
  std::string lower;  // Lower(body)
};

// Envelopes (ncclInternalError, "unhandled system error", DistBackendError ...) and header lines
// ("Last error:", "Traceback (most recent call last):") are never the first error.
bool IsEnvelopeOrHeader(const Message& m);
bool LooksLikeError(const Message& m);
// Whether a (lower-case) line offers causes as possibilities rather than stating one.
bool ListsPossibleCauses(std::string_view lower);
// An IB device in the log reports link layer Ethernet (RoCE).
bool UsesRoce(const LogFacts& facts);

void ExtractFacts(const std::vector<Message>& messages, const std::vector<std::string>& source_names, LogFacts& facts);

EvidenceLine Evidence(const Message& m, const std::vector<std::string>& source_names);

// Fact lists stay small whatever the input (hostile logs can name a million hosts): bounded, so
// keeping them unique stays linear in the input.
inline constexpr std::size_t kMaxFactValues = 512;

template <typename T>
void AddUnique(std::vector<T>& v, const T& x) {
  if (v.size() >= kMaxFactValues) return;
  for (const T& y : v)
    if (y == x) return;
  v.push_back(x);
}

}  // namespace commkit::diagnostics::explain
