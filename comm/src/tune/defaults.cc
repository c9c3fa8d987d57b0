// What each backend can run, and its built-in rules: the long-standing behaviour of the host, gloo
// and mpi backends, written as table rules (tuning.h, docs/tuning.md).
#include "defaults.h"

#include <utility>

#include "shm/slot_meeting.h"

#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"

namespace commkit::tune {

namespace {

// The host all-gather's output size from which it reads peers directly (docs/host-backend.md): on
// the AMD VM process_vm_readv lost to the slots below 4 MiB; on the Intel Xeon VM it won from 32 KiB
// (2 ranks, forced both ways: 2.34 against 2.65 us at 32 KiB, 1.86 against 1.60 at 16 KiB).
constexpr std::size_t kSingleCopyFrom = std::size_t{4} << 20;
constexpr std::size_t kSingleCopyFromIntel = std::size_t{32} << 10;
// The host all-reduce's size from which it reads peers directly on Intel CPUs (DefaultRules).
constexpr std::size_t kAllreduceSingleCopyFromIntel = std::size_t{1} << 20;
constexpr std::size_t kAllreduceSingleCopyUpToIntel = std::size_t{64} << 20;
// The host broadcast's size from which the other ranks read the root's buffer directly.
constexpr std::size_t kBroadcastSingleCopyFrom = std::size_t{128} << 10;

bool PowerOfTwo(int n) { return n >= 1 && (n & (n - 1)) == 0; }

Rule Make(std::string_view backend, CollectiveKind collective, std::size_t lo, std::size_t hi,
          CollectiveAlgorithm algorithm, std::string why) {
  Rule r;
  r.backend = std::string(backend);
  r.collective = collective;
  r.min_bytes = lo;
  r.max_bytes = hi;
  r.algorithm = algorithm;
  r.source = Source::kDefault;
  r.why = std::move(why);
  return r;
}

}  // namespace

std::vector<CollectiveAlgorithm> Algorithms(std::string_view backend, CollectiveKind collective,
                                            const GroupShape& shape) {
  using A = CollectiveAlgorithm;
  if (backend == "host") {
    // Across hosts the all-reduce is flat over UCX or hierarchical; within a host (and for the
    // within-host step of the hierarchical all-reduce, a reduce) the shared-memory engine's two.
    if (collective == CollectiveKind::kAllreduce && shape.nodes > 1) return {A::kRing, A::kHalvingDoubling, A::kHierarchical};
    if (collective == CollectiveKind::kAllreduce) return {A::kFlat, A::kSliced, A::kSingleCopy};
    if (collective == CollectiveKind::kReduce) return {A::kFlat, A::kSliced};
    // All-gather(v) and gather within a host: staged through the slots or single-copy (sized by the
    // whole output).
    // Broadcast within a host likewise (sized by the broadcast buffer).
    if ((collective == CollectiveKind::kAllgather || collective == CollectiveKind::kBroadcast) && shape.nodes == 1)
      return {A::kFlat, A::kSingleCopy};
    return {};
  }
  if (backend == "gloo") {
    // Within a node also the shared-memory meeting every call holds anyway (flat, up to a slot).
    if (collective == CollectiveKind::kAllreduce && shape.nodes == 1)
      return {A::kRing, A::kHalvingDoubling, A::kBcube, A::kFlat};
    if (collective == CollectiveKind::kAllreduce) return {A::kRing, A::kHalvingDoubling, A::kBcube};
    return {};
  }
  if (backend == "mpi") {
    if (collective == CollectiveKind::kAllreduce) return {A::kRecursiveDoubling, A::kRing, A::kLibrary, A::kFlat};
    return {};
  }
  return {};
}

std::size_t AlgorithmMaxBytes(std::string_view backend, CollectiveAlgorithm algorithm, const GroupShape& shape) {
  if ((backend == "mpi" || backend == "gloo") && algorithm == CollectiveAlgorithm::kFlat)
    return comm::SlotMeeting::SlotBytesFor(shape.ranks);
  return kNoLimit;
}

std::vector<Rule> DefaultRules(std::string_view backend, const GroupShape& shape) {
  using A = CollectiveAlgorithm;
  std::vector<Rule> out;
  if (backend == "host") {
    // Within a host: every rank reduces everything from the slots while that is cheaper than the
    // extra synchronisation of slicing. With more ranks than cores every synchronisation is a sleep
    // and a wake-up, and flat wins up to 64 KiB (4 ranks on 2 cores). With a core per rank (2 ranks,
    // interleaved runs) the boundary follows the CPU: on the AMD VM sliced won from 2 KiB; on an Intel
    // Xeon VM, where rounds rotate in the slot from 2 KiB, flat took 0.8-0.9x sliced's time from 2 to
    // 32 KiB in the all-reduce and 0.55-0.75x up to 32 KiB in the reduce (whose non-roots only copy
    // in), tied at 64-256 KiB and lost from 1 MiB (docs/host-backend.md, "Flat or sliced").
    const bool oversubscribed = shape.cores_per_node > 0 && shape.ranks_per_node > shape.cores_per_node;
    const bool intel = shape.cpu_vendor == "GenuineIntel";
    for (CollectiveKind c : {CollectiveKind::kAllreduce, CollectiveKind::kReduce}) {
      if (c == CollectiveKind::kAllreduce && shape.nodes > 1) continue;
      const std::size_t flat = oversubscribed ? std::size_t{64} << 10
                               : intel        ? (c == CollectiveKind::kReduce ? std::size_t{64} : 32) << 10
                                              : std::size_t{1} << 10;
      const std::string where = oversubscribed ? " with more ranks than cores" : intel ? " on Intel CPUs" : "";
      out.push_back(Make(backend, c, 0, flat + 1, A::kFlat,
                         StrCat("built-in: flat up to ", HumanBytes(static_cast<double>(flat)), where,
                                " (docs/host-backend.md)")));
      // On Intel CPUs reading the peers' inputs (single_copy) took 0.7x sliced's time at 4-16 MiB,
      // 0.8x at 64 MiB and 0.9x at 1 MiB; it lost below, and at 256 MiB, where sliced streams its
      // output past the cache (2 ranks; docs/host-backend.md, "Single-copy all-reduce"). Unmeasured
      // elsewhere.
      const bool read = intel && !oversubscribed && c == CollectiveKind::kAllreduce;
      out.push_back(Make(backend, c, flat + 1, read ? kAllreduceSingleCopyFromIntel : kNoLimit, A::kSliced,
                         StrCat("built-in: sliced above ", HumanBytes(static_cast<double>(flat)), where)));
      if (read) {
        out.push_back(Make(backend, c, kAllreduceSingleCopyFromIntel, kAllreduceSingleCopyUpToIntel + 1, A::kSingleCopy,
                           StrCat("built-in: single-copy from ", HumanBytes(kAllreduceSingleCopyFromIntel), " to ",
                                  HumanBytes(kAllreduceSingleCopyUpToIntel),
                                  " on Intel CPUs where the ranks may read each other")));
        out.push_back(Make(backend, c, kAllreduceSingleCopyUpToIntel + 1, kNoLimit, A::kSliced,
                           StrCat("built-in: sliced above ", HumanBytes(kAllreduceSingleCopyUpToIntel), where)));
      }
    }
    if (shape.nodes == 1 && !oversubscribed) {
      // Staged for small outputs (one round, data in the cache); single-copy from `from`, where staging
      // costs a second pass and a synchronisation per slot. The all-gather's `from` (4 MiB; 32 KiB on
      // Intel CPUs) is sized by the whole output; a broadcast's staged round copies in, then out, one after the other, and
      // single-copy took 0.6-0.8x its time from 128 KiB to 1 MiB and tied above (2 ranks). With more
      // ranks than cores neither led consistently (4 ranks on 2 cores): staged stays
      // (docs/host-backend.md).
      for (const auto& [c, from] : {std::pair{CollectiveKind::kAllgather, intel ? kSingleCopyFromIntel : kSingleCopyFrom},
                                    std::pair{CollectiveKind::kBroadcast, kBroadcastSingleCopyFrom}}) {
        out.push_back(Make(backend, c, 0, from, A::kFlat,
                           StrCat("built-in: staged through shared memory below ", HumanBytes(from),
                                  " (docs/host-backend.md)")));
        out.push_back(Make(backend, c, from, kNoLimit, A::kSingleCopy,
                           StrCat("built-in: single-copy from ", HumanBytes(from), " where the ranks may read each other")));
      }
    } else if (shape.nodes == 1) {
      for (CollectiveKind c : {CollectiveKind::kAllgather, CollectiveKind::kBroadcast})
        out.push_back(Make(backend, c, 0, kNoLimit, A::kFlat,
                           "built-in: staged through shared memory with more ranks than cores (docs/host-backend.md)"));
    }
    if (shape.nodes > 1)
      out.push_back(Make(backend, CollectiveKind::kAllreduce, 0, kNoLimit, A::kRing,
                         "built-in: flat ring over UCX (when the cost model cannot plan)"));
    return out;
  }
  if (backend == "gloo") {
    // Halving-doubling up to a per-rank-count size, ring above; bcube never; non-power-of-two rank
    // counts always ring (scripts/gloo-algorithm-sweep.py, docs/gloo-algorithms.md: at 2 ranks
    // halving-doubling took 0.12-0.33x ring's time up to 1 MiB, at 4 ranks 0.17-0.73x up to 256 KiB,
    // ring 1.3-3.3x faster at 16-64 MiB; 3 ranks inconsistent). Beyond 4 ranks: the 4-rank limit.
    // Within a node the inputs up to a slot (64 KiB) travel in the meeting every call holds: one
    // copy in and a reduction out of shared memory, against a Gloo call of 100 us and more
    // (docs/gloo-algorithms.md, "Small collectives in the meeting").
    std::size_t from = 0;
    if (shape.nodes == 1 && shape.ranks >= 2) {
      const std::size_t slot = AlgorithmMaxBytes(backend, A::kFlat, shape);
      out.push_back(Make(backend, CollectiveKind::kAllreduce, 0, slot + 1, A::kFlat,
                         StrCat("built-in: flat in the shared-memory meeting up to ", HumanBytes(static_cast<double>(slot)),
                                " within a node (docs/gloo-algorithms.md)")));
      from = slot + 1;
    }
    std::size_t limit = 0;
    if (shape.ranks >= 2 && PowerOfTwo(shape.ranks)) limit = shape.ranks == 2 ? std::size_t{1} << 20 : std::size_t{256} << 10;
    if (limit > 0) {
      out.push_back(Make(backend, CollectiveKind::kAllreduce, from, limit + 1, A::kHalvingDoubling,
                         StrCat("built-in: halving_doubling up to ", HumanBytes(static_cast<double>(limit)), " at ",
                                shape.ranks, " ranks (docs/gloo-algorithms.md)")));
      out.push_back(Make(backend, CollectiveKind::kAllreduce, limit + 1, kNoLimit, A::kRing,
                         StrCat("built-in: ring above ", HumanBytes(static_cast<double>(limit)))));
    } else {
      out.push_back(Make(backend, CollectiveKind::kAllreduce, from, kNoLimit, A::kRing,
                         shape.ranks < 2 ? "built-in: ring" : "built-in: ring at a rank count that is not a power of two"));
    }
    return out;
  }
  if (backend == "mpi") {
    // Flat over the shared-memory slots up to a slot's 64 KiB (recursive doubling, log2 p whole
    // exchanges, where the group has no slots), the segmented ring above. Between 16 and 64 KiB the
    // slots took 0.5-0.7x the time of recursive doubling at 2 and 4 ranks (docs/mpi-backend.md).
    constexpr std::size_t kFlatMax = std::size_t{64} << 10;
    out.push_back(Make(backend, CollectiveKind::kAllreduce, 0, kFlatMax + 1, A::kFlat,
                       "built-in: flat over shared memory up to 64 KiB (docs/mpi-backend.md)"));
    Rule ring = Make(backend, CollectiveKind::kAllreduce, kFlatMax + 1, kNoLimit, A::kRing,
                     "built-in: ring in 256 KiB segments above 64 KiB");
    ring.params.segment_bytes = std::size_t{256} << 10;
    out.push_back(ring);
    return out;
  }
  return out;
}

std::vector<Rule> TopologyRules(std::string_view backend, const GroupShape& shape, double network_Bps,
                                double network_alpha_s, const std::string& derivation) {
  std::vector<Rule> out;
  if (backend != "host" || shape.nodes < 2 || !(network_Bps > 0)) return out;
  // The host backend across hosts: shared memory within a host, the probed network between. Per size
  // the cheapest of ring and halving-doubling, and hierarchical from the first size where it is
  // predicted no slower and every size above (with a slower network the flat algorithms only fall
  // further behind; docs/host-backend.md). Among the leaders: ring or halving-doubling, per size.
  topology::ClusterShape cs;
  cs.nodes = shape.nodes;
  cs.ranks_per_node = shape.ranks_per_node;
  cs.intra = topology::DefaultLinkCost(topology::LinkClass::kSHM);
  cs.inter = topology::NetworkLinkCost(network_Bps * 8 / 1e6 / 0.9, false);
  cs.inter.beta_Bps = network_Bps;
  cs.inter.alpha_s = network_alpha_s;
  topology::ClusterShape leaders = cs;
  leaders.ranks_per_node = 1;
  auto model = topology::CostModel::Create(cs);
  auto leader_model = topology::CostModel::Create(leaders);
  if (!model.ok() || !leader_model.ok()) return out;
  const std::string why = StrCat("topology cost model: ", derivation);
  bool hierarchical = false;
  std::size_t lo = 0;
  for (double bytes = 8; bytes <= double{1 << 30}; bytes *= 2) {
    Rule r;
    r.backend = std::string(backend);
    r.collective = CollectiveKind::kAllreduce;
    r.min_bytes = lo;
    r.max_bytes = bytes >= double{1 << 30} ? kNoLimit : static_cast<std::size_t>(bytes) + 1;
    r.source = Source::kTopology;
    r.why = why;
    // Every algorithm asked for here has a formula (CostModel::Models).
    r.params.between = leader_model->Predict(CollectiveAlgorithm::kHalvingDoubling, bytes)->time_s <
                               leader_model->Predict(CollectiveAlgorithm::kRing, bytes)->time_s
                           ? CollectiveAlgorithm::kHalvingDoubling
                           : CollectiveAlgorithm::kRing;
    double best = model->Predict(CollectiveAlgorithm::kRing, bytes)->time_s;
    r.algorithm = CollectiveAlgorithm::kRing;
    const double hd = model->Predict(CollectiveAlgorithm::kHalvingDoubling, bytes)->time_s;
    if (hd < best) {
      best = hd;
      r.algorithm = CollectiveAlgorithm::kHalvingDoubling;
    }
    if (shape.ranks_per_node > 1 &&
        (hierarchical || model->Predict(CollectiveAlgorithm::kHierarchical, bytes)->time_s <= best)) {
      r.algorithm = CollectiveAlgorithm::kHierarchical;
      hierarchical = true;
    }
    r.predicted_s = model->Predict(r.algorithm, bytes)->time_s;
    if (!out.empty() && out.back().algorithm == r.algorithm && out.back().params == r.params) {
      out.back().max_bytes = r.max_bytes;
    } else {
      out.push_back(std::move(r));
    }
    lo = static_cast<std::size_t>(bytes) + 1;
  }
  return out;
}

double ModelSeconds(std::string_view backend, const GroupShape& shape, CollectiveAlgorithm algorithm, double bytes,
                    double network_Bps, double network_alpha_s) {
  topology::ClusterShape cs;
  cs.nodes = shape.nodes;
  cs.ranks_per_node = shape.ranks_per_node;
  // Uncalibrated: the cost model's documented defaults for this machine's links (gloo's flat moves
  // through the shared-memory meeting, its other algorithms over TCP).
  const bool tcp = backend == "gloo" && algorithm != CollectiveAlgorithm::kFlat;
  cs.intra = topology::DefaultLinkCost(tcp ? topology::LinkClass::kLoopback : topology::LinkClass::kSHM);
  if (shape.nodes > 1) {
    cs.inter = topology::DefaultLinkCost(topology::LinkClass::kNetwork);
    if (network_Bps > 0) {
      cs.inter.beta_Bps = network_Bps;
      cs.inter.alpha_s = network_alpha_s;
    }
  }
  auto model = topology::CostModel::Create(cs);
  if (!model.ok()) return -1;
  // The backends' own all-reduce variants are timed by the formula closest to how they move data.
  CollectiveAlgorithm formula = algorithm;
  switch (algorithm) {
    case CollectiveAlgorithm::kSliced: formula = CollectiveAlgorithm::kRing; break;
    case CollectiveAlgorithm::kFlat:
    case CollectiveAlgorithm::kLibrary: formula = CollectiveAlgorithm::kRecursiveDoubling; break;
    case CollectiveAlgorithm::kBcube: formula = CollectiveAlgorithm::kHalvingDoubling; break;
    default: break;
  }
  auto predicted = model->Predict(formula, bytes);
  return predicted.ok() ? predicted->time_s : -1;
}

}  // namespace commkit::tune
