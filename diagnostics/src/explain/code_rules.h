// Cause rules driven by error codes rather than wording: CUDA runtime / driver codes (number, name or
// the cudaGetErrorString text the catalog matched), errnos reported by a subsystem (an RDMA verb,
// libfabric), and the NCCL source file a warning comes from. They give every line that carries a code a
// family even when no wording rule knows the message.
#pragma once

#include "candidates.h"
#include "causes.h"

namespace commkit::diagnostics::explain {

void CodeRules(const RuleContext& ctx, Candidates& c, bool efa_ctx);  // efa_ctx: the log involves libfabric / EFA

}  // namespace commkit::diagnostics::explain
