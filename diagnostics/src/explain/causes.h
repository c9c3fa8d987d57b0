// Cause rules: each scores one cause family from the matched messages and the facts. The family ->
// fix mapping is ours, written from the NCCL / CUDA / PyTorch documentation and settled public threads
// (each rule's `basis`). Confidence policy: high only when the log itself proves the cause (the errno,
// the named interface missing from those listed, the duplicate device, the mismatching collectives);
// families whose usual cause is a hypothesis stay medium or low.
#pragma once

#include <string>
#include <vector>

#include "commkit/diagnostics/explain.h"
#include "facts.h"

namespace commkit::diagnostics::explain {

struct RuleContext {
  const std::vector<Message>& messages;
  const LogFacts& facts;
  const std::vector<std::string>& names;
  const std::vector<Divergence>& divergences;
};

// All candidates with at least one piece of evidence, best first.
std::vector<Diagnosis> ScoreCauses(const RuleContext& ctx);

// Per-input comparison (several logs, or one interleaved log with several ranks/hosts).
std::vector<Divergence> FindDivergences(const std::vector<Message>& messages, const LogFacts& facts,
                                        const std::vector<std::string>& names);

}  // namespace commkit::diagnostics::explain
