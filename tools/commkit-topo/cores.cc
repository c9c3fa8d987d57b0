#include "cores.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <utility>

#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "commkit/topology/core_latency.h"

using namespace commkit;

namespace {

// Beyond this many CPUs every pair would take minutes: the first CPU is measured against each other.
constexpr std::size_t kAllPairsUpTo = 16;

}  // namespace

int RunTopoCores(const TopoCoresArgs& args) {
  auto fail = [](int code, const std::string& what) {
    std::cerr << "commkit-topo cores: " << EscapeControl(what) << "\n";
    return code;
  };
  std::vector<int> cpus = args.cpus.empty() ? topology::AllowedCpus() : args.cpus;
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  if (cpus.size() < 2 && !args.cpus.empty()) return fail(1, "--cpus: name at least two CPUs, e.g. --cpus 0,1");
  if (cpus.size() < 2)
    return fail(1, StrCat("needs two CPUs to measure between; this process may run on ", cpus.size() == 1 ? "only CPU " : "",
                          JoinValues(cpus, ","), " (taskset / cgroup limits)"));
  if (args.round_trips < 100 || args.round_trips > 10'000'000) return fail(1, "--round-trips must be 100..10000000");
  std::vector<std::pair<int, int>> pairs;
  const bool all_pairs = cpus.size() <= kAllPairsUpTo;
  for (std::size_t i = 0; i < cpus.size(); ++i)
    for (std::size_t j = i + 1; j < cpus.size(); ++j)
      if (all_pairs || i == 0) pairs.emplace_back(cpus[i], cpus[j]);

  topology::CoreLatencyOptions options;
  options.round_trips = args.round_trips;
  std::vector<topology::CoreLatency> results;
  for (auto [a, b] : pairs) {
    auto r = topology::MeasureCoreLatency(a, b, options);
    if (!r.ok()) return fail(r.status().code() == StatusCode::kInvalidArgument ? 1 : 2, r.status().message());
    results.push_back(*r);
  }
  const auto [fast, slow] = std::minmax_element(results.begin(), results.end(), [](const auto& x, const auto& y) {
    return x.round_trip_ns < y.round_trip_ns;
  });
  // Two latency levels that far apart are two places in the machine, not noise: one pair measured
  // again varies up to 2x (60-140 ns on the development VM), a chiplet boundary is 3-6x.
  const bool split = slow->round_trip_ns > 3 * fast->round_trip_ns;
  if (args.json) {
    nlohmann::json j;
    j["cpus"] = cpus;
    j["all_pairs"] = all_pairs;
    j["round_trips_per_batch"] = args.round_trips;
    for (const auto& r : results)
      j["pairs"].push_back({{"cpu_a", r.cpu_a}, {"cpu_b", r.cpu_b}, {"round_trip_ns", r.round_trip_ns},
                            {"min_ns", r.min_ns}, {"max_ns", r.max_ns}, {"handoff_GBps", r.handoff_Bps / 1e9}});
    j["fastest_ns"] = fast->round_trip_ns;
    // The handoff bandwidth of the fastest pair (of the only pair, for two CPUs).
    j["handoff_GBps"] = fast->handoff_Bps / 1e9;
    j["slowest_ns"] = slow->round_trip_ns;
    j["split"] = split;
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::cout << "# core-to-core round trip of one cache line, ns (median of 5 batches of " << args.round_trips
            << ")\n";
  if (!all_pairs) std::cout << "# " << cpus.size() << " CPUs: CPU " << cpus[0] << " against each other one\n";
  std::map<std::pair<int, int>, double> at;
  for (const auto& r : results) at[{r.cpu_a, r.cpu_b}] = at[{r.cpu_b, r.cpu_a}] = r.round_trip_ns;
  std::vector<int> cols = all_pairs ? cpus : std::vector<int>{cpus[0]};
  std::printf("%6s", "cpu");
  for (int c : cols) std::printf(" %7d", c);
  std::printf("\n");
  for (int r : cpus) {
    if (!all_pairs && r == cpus[0]) continue;
    std::printf("%6d", r);
    for (int c : cols) {
      auto it = at.find({r, c});
      if (it == at.end())
        std::printf(" %7s", "-");
      else
        std::printf(" %7.0f", it->second);
    }
    std::printf("\n");
  }
  std::printf("fastest %.0f ns (CPUs %d-%d), slowest %.0f ns (CPUs %d-%d)\n", fast->round_trip_ns, fast->cpu_a, fast->cpu_b,
              slow->round_trip_ns, slow->cpu_a, slow->cpu_b);
  if (results.size() == 1 && results[0].handoff_Bps > 0)
    std::printf("64 KiB written on CPU %d and read on CPU %d, in turn: %.2f GB/s\n", results[0].cpu_b, results[0].cpu_a,
                results[0].handoff_Bps / 1e9);
  if (split)
    std::printf("pairs above three times the fastest cross a die, chiplet or socket boundary (on a virtual machine: the "
                "hypervisor placed those vCPUs apart, which can change while it runs)\n");
  return 0;
}
