// Known NCCL bugs fixed in a later release: the line that shows one, with the NCCL version the log
// reports (or none), makes `nccl.bug` a candidate with the release that fixes it.
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

// "2.26.2+cuda12.4" -> {2,26,2}; empty when not a version (also when a component has more than 8
// digits: the text comes from the log).
std::vector<int> VersionOf(std::string_view v) {
  std::vector<int> out;
  int cur = -1;
  for (char ch : v) {
    if (ch >= '0' && ch <= '9') {
      if (cur >= 10'000'000) return {};
      cur = (cur < 0 ? 0 : cur * 10) + (ch - '0');
    } else if (ch == '.' && cur >= 0) {
      out.push_back(cur);
      cur = -1;
    } else {
      break;
    }
  }
  if (cur >= 0) out.push_back(cur);
  return out;
}

// Known NCCL bugs fixed in a later release (from release notes and settled threads): a line with all
// `words` (lower case) while the log's NCCL version is in [from, fixed_in), or unknown when `unknown_ok`.
struct KnownBug {
  const char* from;
  const char* fixed_in;
  std::initializer_list<const char*> words;
  bool unknown_ok;
  const char* cause;
  const char* basis;
};
const KnownBug kKnownBugs[] = {
    {"2.26.2", "2.26.5", {"nvls", "invalid argument"}, false,
     "NCCL 2.26.2-2.26.4 fails NVLS setup with 'invalid argument' on older drivers (e.g. 12.2); fixed in 2.26.5",
     "pytorch/pytorch#150852 (maintainer: fixed by NCCL 2.26.5)"},
    {"0", "2.9.9", {"api call is not supported in the installed cuda driver"}, true,
     "NCCL before 2.9.9, built with a newer CUDA 11.x than the driver supports, calls driver APIs the installed driver "
     "lacks; NCCL 2.9.9 handles CUDA enhanced compatibility",
     "NVIDIA/nccl#496 (settled: NCCL 2.9.9)"},
    {"0", "99", {"ncclmaxsharedmem", "exceeds device/fn maxsharedmem"}, true,
     "This NCCL build has no kernels for this GPU architecture (its shared-memory use exceeds the device's): the GPU "
     "is newer than the NCCL release", "NVIDIA/nccl-tests#291 (settled: RTX 5090 works from NCCL 2.26.2)"},
    {"0", "2.19.1", {"transport.cc:", "cuda failure", "invalid argument"}, true,
     "NCCL before 2.19 could fail its P2P transport setup (ncclTransportP2pSetup in transport.cc) with 'invalid argument' "
     "because the first cudaMemcpy there was asynchronous; fixed in NCCL 2.19",
     "NVIDIA/nccl#957 (maintainer: fixed in 2.19)"},
    // A library bug rather than NCCL's: the registration fails in libfabric, whatever the NCCL version
    // from 2.19 on, until libfabric is upgraded.
    {"2.19", "99", {"net/ofi", "unable to register memory", "type = 2", "-22"}, true,
     "aws-ofi-nccl cannot register CUDA buffers (type 2, EINVAL) with NCCL 2.19+ on the libfabric of EFA installers "
     "before 1.29: upgrade the EFA installer (or set FI_EFA_SET_CUDA_SYNC_MEMOPS=0, or use NCCL 2.18)",
     "aws/aws-ofi-nccl#584 (maintainer: known incompatibility, fixed by EFA installer 1.29)"},
    {"0", "2.26.2", {"geforce rtx 50"}, false,
     "NCCL before 2.26.2 does not work on GeForce RTX 50-series GPUs (sm_120)", "NVIDIA/nccl-tests#291 (settled: NCCL "
     "2.26.2)"},
};

}  // namespace

void KnownBugRules(const RuleContext& ctx, Candidates& c) {
  std::vector<int> version;
  if (!ctx.facts.nccl_versions.empty()) version = VersionOf(ctx.facts.nccl_versions.front());
  for (const KnownBug& bug : kKnownBugs) {
    bool in_range = version.empty() ? bug.unknown_ok : (version >= VersionOf(bug.from) && version < VersionOf(bug.fixed_in));
    if (!in_range) continue;
    for (const Message& m : ctx.messages) {
      bool all = true;
      for (const char* w : bug.words) all = all && Contains(m.lower, w);
      if (!all) continue;
      c.Hit("nccl.bug", version.empty() ? 64 : 80, false,
            std::string(bug.cause) + " [" + bug.basis + "]" +
                (version.empty() ? "" : "; this log shows NCCL " + ctx.facts.nccl_versions.front()),
            &m);
      if (Diagnosis* d = c.Get("nccl.bug"); d != nullptr && d->basis.empty()) d->basis = bug.basis;
      break;
    }
  }
}

}  // namespace commkit::diagnostics::explain
