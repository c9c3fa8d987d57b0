// Python tracebacks of ranks stopped in different torch.distributed collectives. When ranks issue
// different collectives (a rank that logs other metrics, skips a barrier, or takes another branch) the
// job hangs and each rank's traceback, printed at the timeout or on Ctrl-C, ends in the collective that
// rank was waiting in. Two different collectives among the tracebacks of one log is that desync.
//
// A single rank's stack never holds two of them: the object variants (broadcast_object_list,
// all_gather_object ...) call their base collective and are folded into it, and the one nesting c10d
// itself has (a barrier inside init_process_group / new_group) is left out. Several tracebacks of one
// rank printed over time would look the same, so the claim stays below a proof.
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

// The collective a c10d function name stands for, or empty (wrappers, point-to-point, setup).
std::string_view CollectiveOf(std::string_view fn) {
  struct Alias {
    std::string_view name, collective;
  };
  static constexpr Alias kAliases[] = {
      {"all_reduce", "all_reduce"},
      {"allreduce", "all_reduce"},
      {"all_reduce_coalesced", "all_reduce"},
      {"broadcast", "broadcast"},
      {"broadcast_object_list", "broadcast"},
      {"all_gather", "all_gather"},
      {"allgather", "all_gather"},
      {"all_gather_object", "all_gather"},
      {"all_gather_into_tensor", "all_gather"},
      {"_all_gather_base", "all_gather"},
      {"reduce_scatter", "reduce_scatter"},
      {"reduce_scatter_tensor", "reduce_scatter"},
      {"_reduce_scatter_base", "reduce_scatter"},
      {"all_to_all", "all_to_all"},
      {"all_to_all_single", "all_to_all"},
      {"alltoall", "all_to_all"},
      {"barrier", "barrier"},
      {"monitored_barrier", "barrier"},
      {"reduce", "reduce"},
      {"gather", "gather"},
      {"gather_object", "gather"},
      {"scatter", "scatter"},
      {"scatter_object_list", "scatter"},
  };
  for (const Alias& a : kAliases)
    if (a.name == fn) return a.collective;
  return {};
}

// The identifier at l[pos...].
std::string_view IdentAt(std::string_view l, std::size_t pos) {
  std::size_t end = pos;
  while (end < l.size() && ((l[end] >= 'a' && l[end] <= 'z') || (l[end] >= '0' && l[end] <= '9') || l[end] == '_'))
    ++end;
  return l.substr(pos, end - pos);
}

// The collective a traceback line shows a rank in: a frame of c10d's own module ("distributed_c10d.py",
// line N, in broadcast) or a source line that calls one (torch.distributed.barrier(group=...),
// dist.all_reduce(t)). Empty otherwise.
std::string_view CollectiveInTraceback(std::string_view l) {
  if (l.find("distributed_c10d.py") != std::string_view::npos) {
    std::size_t at = l.rfind(", in ");
    return at == std::string_view::npos ? std::string_view() : CollectiveOf(IdentAt(l, at + 5));
  }
  for (std::string_view prefix : {"torch.distributed.", "dist."}) {
    std::size_t at = l.find(prefix);
    if (at == std::string_view::npos || (at > 0 && l[at - 1] != ' ' && l[at - 1] != '=' && l[at - 1] != '(')) continue;
    std::string_view fn = IdentAt(l, at + prefix.size());
    if (at + prefix.size() + fn.size() < l.size() && l[at + prefix.size() + fn.size()] == '(') return CollectiveOf(fn);
  }
  return {};
}

}  // namespace

void TracebackDesyncRules(const RuleContext& ctx, Candidates& c) {
  std::vector<std::string> seen;
  std::vector<const Message*> where;
  for (const Message& m : ctx.messages) {
    const std::string& l = m.lower;
    // c10d's own nesting: setup runs a barrier (store-based or collective) inside other calls.
    if (Any(l, {"init_process_group", "new_group", "_store_based_barrier", "destroy_process_group", "init_device_mesh",
                "_new_group_with_tag"}))
      return;
    std::string_view coll = CollectiveInTraceback(l);
    if (coll.empty()) continue;
    bool is_new = true;
    for (const std::string& s : seen) is_new = is_new && s != coll;
    if (is_new) {
      seen.emplace_back(coll);
      where.push_back(&m);
    }
  }
  if (seen.size() < 2) return;
  c.Hit("collective.mismatch", 52, false,
        "The tracebacks show ranks waiting in different collectives (" + Join(seen, ", ") +
            "): they issued different operations, e.g. a rank that took another branch or logged other metrics "
            "(set TORCH_DISTRIBUTED_DEBUG=DETAIL to have c10d name the mismatch)",
        where.front());
  for (std::size_t i = 1; i < where.size(); ++i) c.AddEvidence("collective.mismatch", *where[i]);
}

}  // namespace commkit::diagnostics::explain
