// Alpha-beta all-reduce cost model (formulas in cost_model.h and docs/topology.md).
#include "commkit/topology/cost_model.h"

#include <algorithm>
#include <cmath>

#include "commkit/common/strings.h"

namespace commkit::topology {
namespace {

int CeilLog2(int p) {
  int steps = 0;
  while ((1 << steps) < p) ++steps;
  return steps;
}

// Ring and recursive halving-doubling (Rabenseifner) all-reduce of n bytes among p ranks over one
// link class (alpha a, bandwidth b). Halving-doubling on a non-power-of-two count first folds the
// p - p' extra ranks into partners (a whole-buffer send) and at the end sends them the result.
double FlatRingTime(double p, double a, double b, double n) { return 2 * (p - 1) * a + 2 * (p - 1) / p * n / b; }
double FlatHalvingDoublingTime(int p, double a, double b, double n) {
  if (p <= 1) return 0;
  int steps = 0;
  while ((2 << steps) <= p) ++steps;  // p' = 2^steps <= p
  const double pp = 1 << steps;
  const double fold = pp < p ? 2 * (a + n / b) : 0;
  return fold + 2 * steps * a + 2 * (pp - 1) / pp * n / b;
}

}  // namespace

std::string_view ToString(LinkClass c) {
  switch (c) {
    case LinkClass::kNVLink: return "nvlink";
    case LinkClass::kPCIe: return "pcie";
    case LinkClass::kSHM: return "shm";
    case LinkClass::kNetwork: return "network";
    case LinkClass::kLoopback: return "loopback";
  }
  return "unknown";
}

LinkCost DefaultLinkCost(LinkClass link) {
  switch (link) {
    case LinkClass::kNVLink: return {link, 2e-6, 150e9, "default: NVLink, 2 us, 150 GB/s per direction (A100-class)"};
    case LinkClass::kPCIe: return PCIeLinkCost(4, 16);
    case LinkClass::kSHM: return {link, 1.5e-6, 10e9, "default: shared memory across sockets, 1.5 us, 10 GB/s"};
    case LinkClass::kNetwork: return NetworkLinkCost(100000, /*rdma=*/false);
    case LinkClass::kLoopback: return {link, 20e-6, 3e9, "default: TCP loopback, 20 us, 3 GB/s"};
  }
  return {};
}

LinkCost NetworkLinkCost(double rate_mbps, bool rdma) {
  LinkCost c;
  c.link = LinkClass::kNetwork;
  c.alpha_s = rdma ? 5e-6 : 25e-6;
  c.beta_Bps = 0.9 * rate_mbps * 1e6 / 8;
  c.derivation = StrCat("network ", rate_mbps / 1000, " Gb/s x 0.9 efficiency, ", rdma ? "RDMA 5 us" : "TCP sockets 25 us");
  return c;
}

LinkCost PCIeLinkCost(int generation, int width) {
  static constexpr double kGTs[] = {0, 2.5, 5, 8, 16, 32, 64};
  const int gen = std::clamp(generation, 1, 6);
  const double encoding = gen <= 2 ? 0.8 : (gen <= 5 ? 128.0 / 130.0 : 242.0 / 256.0);
  LinkCost c;
  c.link = LinkClass::kPCIe;
  c.alpha_s = 3e-6;
  c.beta_Bps = kGTs[gen] * 1e9 * encoding / 8 * std::max(1, width) * 0.8;
  c.derivation = StrCat("PCIe gen", gen, " x", std::max(1, width), ": ", kGTs[gen], " GT/s per lane, 0.8 efficiency, 3 us");
  return c;
}

LinkCost NVLinkLinkCost(int links, double per_link_GBps) {
  LinkCost c;
  c.link = LinkClass::kNVLink;
  c.alpha_s = 2e-6;
  c.beta_Bps = std::max(1, links) * per_link_GBps * 1e9;
  c.derivation = StrCat(std::max(1, links), " NVLink links x ", per_link_GBps, " GB/s per direction, 2 us");
  return c;
}

Result<CostModel> CostModel::Create(ClusterShape shape) {
  if (shape.nodes < 1 || shape.ranks_per_node < 1)
    return Status::InvalidArgument(StrCat("cost model: nodes (", shape.nodes, ") and ranks per node (",
                                          shape.ranks_per_node, ") must be >= 1"));
  if (shape.ranks_per_node > 1 && !(shape.intra.beta_Bps > 0))
    return Status::InvalidArgument("cost model: the intra-node link needs a positive bandwidth");
  if (shape.nodes > 1 && !(shape.inter.beta_Bps > 0))
    return Status::InvalidArgument("cost model: the inter-node link needs a positive bandwidth");
  if (shape.intra.alpha_s < 0 || shape.inter.alpha_s < 0)
    return Status::InvalidArgument("cost model: latencies must be >= 0");
  return CostModel(std::move(shape));
}

std::vector<CollectiveAlgorithm> CostModel::Applicable() const {
  std::vector<CollectiveAlgorithm> out = {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kRecursiveDoubling,
                                          CollectiveAlgorithm::kHalvingDoubling};
  if (shape_.nodes > 1 && shape_.ranks_per_node > 1) out.push_back(CollectiveAlgorithm::kHierarchical);
  return out;
}

bool CostModel::Models(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
    case CollectiveAlgorithm::kRecursiveDoubling:
    case CollectiveAlgorithm::kHalvingDoubling:
    case CollectiveAlgorithm::kHierarchical: return true;
    default: return false;
  }
}

Result<Prediction> CostModel::Predict(CollectiveAlgorithm algorithm, double bytes) const {
  if (!Models(algorithm))
    return Status::InvalidArgument(StrCat("cost model: no formula for ", ToString(algorithm),
                                          " (it models ring, recursive_doubling, halving_doubling and hierarchical)"));
  const double n = std::max(0.0, bytes);
  const double p = shape_.ranks();
  const double g = shape_.ranks_per_node;
  const double N = shape_.nodes;
  const LinkCost& li = shape_.intra;
  const LinkCost& ln = shape_.inter;
  double t = 0;
  if (p > 1) {
    switch (algorithm) {
      case CollectiveAlgorithm::kRing:
      case CollectiveAlgorithm::kHalvingDoubling: {
        // Both run over the slowest link they cross; with several nodes one hop per node crosses the NIC.
        double a = shape_.nodes > 1 ? std::max(ln.alpha_s, g > 1 ? li.alpha_s : 0) : li.alpha_s;
        double b = shape_.nodes > 1 ? (g > 1 ? std::min(li.beta_Bps, ln.beta_Bps) : ln.beta_Bps) : li.beta_Bps;
        t = algorithm == CollectiveAlgorithm::kRing ? FlatRingTime(p, a, b, n)
                                                    : FlatHalvingDoublingTime(shape_.ranks(), a, b, n);
        break;
      }
      case CollectiveAlgorithm::kRecursiveDoubling: {
        // log2(g) exchanges inside the node, log2(N) across nodes with all g ranks sharing the NIC.
        const int si = CeilLog2(shape_.ranks_per_node);
        const int sn = CeilLog2(shape_.nodes);
        if (si > 0) t += si * (li.alpha_s + n / li.beta_Bps);
        if (sn > 0) t += sn * (ln.alpha_s + n * g / ln.beta_Bps);
        break;
      }
      case CollectiveAlgorithm::kHierarchical: {
        if (g > 1) t += 2 * ((g - 1) * li.alpha_s + (g - 1) / g * n / li.beta_Bps);
        // Between nodes: the faster of a ring and halving-doubling among the N node shards.
        if (N > 1)
          t += std::min(FlatRingTime(N, ln.alpha_s, ln.beta_Bps, n),
                        FlatHalvingDoublingTime(shape_.nodes, ln.alpha_s, ln.beta_Bps, n));
        break;
      }
      default: break;  // refused above
    }
  }
  Prediction pr;
  pr.algorithm = algorithm;
  pr.bytes = n;
  pr.time_s = t;
  pr.algbw_Bps = t > 0 ? n / t : 0;
  pr.busbw_Bps = p > 1 ? pr.algbw_Bps * 2 * (p - 1) / p : 0;
  return pr;
}

Prediction CostModel::Best(double bytes) const {
  Prediction best;
  bool first = true;
  for (auto a : Applicable()) {
    Prediction p = *Predict(a, bytes);  // Applicable() lists modelled algorithms only
    if (first || p.time_s < best.time_s) {
      best = p;
      first = false;
    }
  }
  return best;
}

std::vector<Prediction> CostModel::Sweep(double min_bytes, double max_bytes, double factor) const {
  std::vector<Prediction> out;
  if (!(factor > 1) || !(min_bytes > 0) || max_bytes < min_bytes) return out;
  for (double n = min_bytes; n <= max_bytes * (1 + 1e-12) && out.size() < 100000; n *= factor)
    for (auto a : Applicable()) out.push_back(*Predict(a, n));
  return out;
}

std::vector<SizeRange> CostModel::Choices(double min_bytes, double max_bytes, double factor) const {
  std::vector<SizeRange> out;
  if (!(factor > 1) || !(min_bytes > 0) || max_bytes < min_bytes) return out;
  int steps = 0;
  for (double n = min_bytes; n <= max_bytes * (1 + 1e-12) && steps < 100000; n *= factor, ++steps) {
    auto best = Best(n).algorithm;
    if (!out.empty() && out.back().best == best) {
      out.back().max_bytes = n;
    } else {
      out.push_back({n, n, best});
    }
  }
  return out;
}

}  // namespace commkit::topology
