// Rules for what NCCL and c10d report about the communicator itself: peers on other NCCL versions,
// collectives that differ between ranks, collective timeouts, and NCCL result codes printed without the
// warning that says why (NCCL_DEBUG unset).
#include <algorithm>
#include <string>
#include <vector>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

void CollectiveRules(const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  // --- versions (NCCL >= 2.23 says so itself)
  if (Any(l, {"mismatched nccl version detected", "nccl version mismatch with remote peer"}))
    c.Hit("nccl.version_mismatch", 94, true, "NCCL reports peers running a different NCCL version", &m);
  // The dynamic loader found a libnccl without a function the framework was linked against: an older
  // libnccl (LD_LIBRARY_PATH, a system package, a second wheel) was loaded in place of the one it was built with.
  if (Contains(l, "undefined symbol: nccl"))
    c.Hit("nccl.version_mismatch", 90, true, "The libnccl this process loaded lacks an NCCL function the "
          "framework was built against: an older libnccl shadows the matching one", &m);

  // --- collectives
  if (Any(l, {"mismatched collective detected", "collective mismatch error"}))
    c.Hit("collective.mismatch", 86, true, "NCCL saw a peer post a different collective / size (collective "
          "mismatch)", &m);
  if (Contains(l, "detected mismatch between collectives") || Contains(l, "collective fingerprint") ||
      Contains(l, "mismatch between collectives")) {
    // The fingerprints name what differs. Only a different operation, shape or dtype proves ranks issued
    // different collectives; the same operation at another sequence number is also what a rank that fell
    // one call behind (or the checker's own bookkeeping) looks like.
    std::vector<std::string> ops, shapes;
    for (std::string_view key : {"optype=", "tensorshape="})
      for (std::size_t at = l.find(key); at != std::string::npos; at = l.find(key, at + 1)) {
        std::size_t end = l.find_first_of(",)", at + key.size());
        std::string v = l.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
        (key == "optype=" ? ops : shapes).push_back(v);
      }
    auto all_same = [](const std::vector<std::string>& v) {
      return std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v.front(); });
    };
    bool only_sequence = ops.size() >= 2 && all_same(ops) && all_same(shapes);
    if (only_sequence)
      c.Hit("collective.mismatch", 68, false, "Ranks' collective fingerprints differ only in their sequence number "
            "(same operation): one rank is a call behind the others", &m);
    else
      c.Hit("collective.mismatch", 95, true, "Ranks called different collectives (desync)", &m);
  }
  // NCCL's socket transport got a different size than the receiver posted; from 2.27 NCCL itself
  // names mismatched collective sizes / NCCL_PROTO / NCCL_ALGO between ranks. In bootstrap the
  // exchanged structures are fixed per release, so a size difference there points at mixed versions.
  if (Contains(l, "message truncated") && Contains(l, "net/socket"))
    c.Hit("collective.mismatch", 66, false, "A peer sent a different message size than this rank expected: ranks "
          "posted collectives of different sizes or run with different NCCL_PROTO / NCCL_ALGO settings", &m);
  else if (Contains(l, "message truncated : received") && !Contains(l, "efa"))
    c.Hit("nccl.version_mismatch", 55, false, "A bootstrap message had an unexpected size: ranks probably run "
          "different NCCL releases (the bootstrap structures differ between versions)", &m);
  // NCCL refuses a call on a nonblocking communicator whose previous operation (init, split, a group)
  // has not returned ncclSuccess yet. Alone, that is the caller not polling ncclCommGetAsyncError; after
  // an earlier NCCL failure it is that failure's echo, and the earlier line's cause outranks this one.
  if (Contains(l, "attempt to use communicator before the previous operation returned ncclsuccess"))
    c.Hit("nccl.nonblocking_usage", 60, false, "An NCCL call on a nonblocking communicator whose previous "
          "operation (init, split or a group) was still in progress", &m);
  if (Any(l, {"for recv operation to complete", "for send operation to complete"}) && Contains(l, "timed out"))
    c.Hit("collective.timeout", 50, false, "A Gloo send/recv did not complete within the timeout", &m);
  if (Any(l, {"watchdog caught collective operation timeout", "timeout at nccl work", "collective operation timeout",
              "heartbeat monitor timed out", "watchdog got stuck", "exception (either an error or timeout) detected",
              "worknccl::checktimeout"}))
    c.Hit("collective.timeout", 50, false, "A collective did not complete within the process-group timeout", &m);
  // c10d's monitored barrier (TORCH_DISTRIBUTED_DEBUG=DETAIL, or called by the program) names the ranks
  // that never arrived: they hang in an earlier collective or never got there (a crash, a slow step).
  // A rank that arrived but lost its link to rank 0 points at rank 0's own log.
  if (Contains(l, "failed to pass monitoredbarrier"))
    c.Hit("collective.timeout", 62, false, "c10d's monitored barrier names ranks that did not reach it in time: "
          "they are stuck in an earlier collective or never got there (their logs tell which)", &m);
  else if (Contains(l, "reached monitoredbarrier, but received errors"))
    c.Hit("socket.peer_closed", 58, false, "This rank reached c10d's monitored barrier but lost rank 0 while "
          "waiting: the failure is in rank 0's log", &m);
}

void EnvelopeRules(const LogContext& log, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  bool single_host = log.single_host;
  // --- envelopes without the detail line (NCCL_DEBUG unset): the usual causes, low confidence
  if (Contains(l, "invalid usage") && Any(l, {"nccl", "run with nccl_debug"}))
    c.Hit("gpu.duplicate", 38, false, "NCCL reported invalid usage without detail; at communicator init the usual "
          "cause is two ranks on one GPU (rerun with NCCL_DEBUG=WARN to see the message)", &m);
  // ncclUnhandledCudaError without the WARN line that says which call failed: at communicator init the
  // usual cause is a driver older than the CUDA NCCL was built for (NCCL calls driver APIs the old driver
  // lacks); a low hint only, any CUDA detail in the log outranks it.
  if (Contains(l, "unhandled cuda error") && Any(l, {"ncclcomminitrank", "comminit", "init"}))
    c.Hit("cuda.driver_too_old", 25, false, "NCCL reported an unhandled CUDA error at init without detail; the "
          "usual cause is a CUDA driver older than the CUDA NCCL was built for (rerun with NCCL_DEBUG=WARN)", &m);
  // A topology or graph file that does not describe this machine (or this subset of its GPUs) fails
  // NCCL's init in ways it reports as a system or internal error; with one loaded it is the first suspect.
  if (Any(l, {"unhandled system error", "internal error", "ncclinternalerror", "ncclsystemerror"}) &&
      log.topo_file_loaded)
    c.Hit("topo.file", 32, false, "NCCL failed at init without detail while it used a topology / graph file it was "
          "given (NCCL_TOPO_FILE / NCCL_GRAPH_FILE, e.g. from /etc/nccl.conf); a file for another machine or GPU "
          "count breaks init (rerun without it, or with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH)", &m);
  if (Contains(l, "unhandled system error") && single_host)
    c.Hit("shm.space", 28, false, "NCCL reported a system error without detail on a single host; in containers "
          "most often /dev/shm is too small (rerun with NCCL_DEBUG=WARN)", &m);

}

}  // namespace commkit::diagnostics::explain
