#include "plan.h"

#include <iostream>

#include "commkit/comm/tuning.h"
#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"

using namespace commkit;

int RunTopoPlan(const TopoPlanArgs& args, const topology::ProbeReport& report) {
  auto fail = [](const std::string& what) {
    std::cerr << "commkit-topo plan: " << EscapeControl(what) << "\n";
    return 1;
  };
  std::optional<CollectiveKind> kind;
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    if (ToString(static_cast<CollectiveKind>(k)) == args.collective) kind = static_cast<CollectiveKind>(k);
  if (!kind) return fail(StrCat("unknown collective '", args.collective, "' (allreduce, reduce, broadcast, ...)"));
  const auto lo = tune::ParseBytes(args.min_size), hi = tune::ParseBytes(args.max_size);
  if (!lo || !hi || *hi < *lo)
    return fail(StrCat("sizes '", args.min_size, "'..'", args.max_size, "': give byte counts such as 8 and 64M, min <= max"));
  if (args.ranks < 1 || args.nodes < 1 || args.nodes > args.ranks)
    return fail("--ranks and --nodes must be >= 1, with at most one node per rank");
  tune::GroupShape shape;
  shape.ranks = args.ranks;
  shape.nodes = args.nodes;
  shape.ranks_per_node = args.ranks_per_node > 0 ? args.ranks_per_node : (args.ranks + args.nodes - 1) / args.nodes;
  // The host backend's built-in rules follow the CPU vendor: the probed (or captured) machine's.
  for (topology::NodeId c : report.topology.Cpus())
    if (shape.cpu_vendor.empty()) shape.cpu_vendor = report.topology.node(c).cpu.vendor;

  // The network between nodes as this machine's (or the capture's) NICs give it.
  const topology::ClusterShape cluster =
      topology::ClusterShapeFromTopology(report.topology, {shape.nodes, shape.ranks_per_node});
  tune::TableOptions options;
  options.network_Bps = cluster.inter.beta_Bps;
  options.network_alpha_s = cluster.inter.alpha_s;
  options.network_derivation = cluster.inter.derivation;

  std::vector<tune::PlanRow> rows;
  std::vector<std::string> notes;
  for (const std::string& backend : args.backends) {
    if (backend != "host" && backend != "gloo" && backend != "mpi")
      return fail(StrCat("unknown backend '", backend, "' (tunable: host, gloo, mpi)"));
    auto table = tune::Table::ForGroup(backend, shape, options);
    if (!table.ok()) return fail(table.status().message());
    for (const std::string& n : table->notes()) notes.push_back(StrCat(backend, ": ", n));
    auto plan = tune::Plan(*table, *kind, MemoryKind::kHost, *lo, *hi);
    rows.insert(rows.end(), plan.begin(), plan.end());
  }
  if (args.json) {
    std::cout << tune::PlanJson(rows) << "\n";
    return 0;
  }
  std::cout << "# commkit-topo plan: " << args.collective << ", " << shape.ranks << " ranks on " << shape.nodes
            << " node(s), " << shape.ranks_per_node << " per node; network: " << EscapeControl(cluster.inter.derivation)
            << "\n# source: default < topology < calibration < env (docs/tuning.md)\n";
  std::cout << EscapeControl(tune::PlanText(rows));
  for (const std::string& n : notes) std::cout << "# note: " << EscapeControl(n) << "\n";
  return 0;
}
