// The environment's part of the table: COMMKIT_TUNE (or a process-wide spec), the deprecated
// per-backend variables read as rules, and the probed network link for the topology rules.
#include <cstdio>
#include <mutex>

#include "commkit/common/env.h"
#include "commkit/common/strings.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/cost_model.h"
#include "commkit/topology/probe.h"
#include "defaults.h"

namespace commkit::tune {

namespace {

struct ProcessSpec {
  std::mutex mu;
  std::optional<std::string> spec;
  bool set = false;
};
ProcessSpec& Spec() {
  static ProcessSpec* s = new ProcessSpec();
  return *s;
}

// One note per variable per process: the old name still works, and this is what it means now.
void DeprecationNote(std::string_view variable, std::string_view value, const std::string& as) {
  static std::mutex mu;
  static std::vector<std::string>* noted = new std::vector<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& n : *noted)
    if (n == variable) return;
  noted->emplace_back(variable);
  std::fprintf(stderr, "commkit: %s=%s is deprecated; it is read as COMMKIT_TUNE=%s (docs/tuning.md)\n",
               std::string(variable).c_str(), std::string(value).c_str(), as.c_str());
}

Rule Legacy(std::string_view backend, CollectiveKind c, std::size_t lo, std::size_t hi, CollectiveAlgorithm a,
            std::string_view variable, std::string_view value) {
  Rule r;
  r.backend = std::string(backend);
  r.collective = c;
  r.min_bytes = lo;
  r.max_bytes = hi;
  r.algorithm = a;
  r.source = Source::kEnv;
  r.why = StrCat(variable, "=", value, " (deprecated; read as COMMKIT_TUNE=", FormatRule(r), ")");
  return r;
}

}  // namespace

void SetProcessSpec(std::optional<std::string> spec) {
  std::lock_guard<std::mutex> lock(Spec().mu);
  Spec().spec = std::move(spec);
  Spec().set = Spec().spec.has_value();
}

std::optional<std::string> CurrentSpec() {
  {
    std::lock_guard<std::mutex> lock(Spec().mu);
    if (Spec().set) return Spec().spec;
  }
  return EnvRaw("COMMKIT_TUNE");
}

Result<std::vector<Rule>> LegacyEnvRules(std::string_view backend) {
  std::vector<Rule> out;
  auto note = [&](std::string_view variable, std::string_view value, std::size_t first) {
    std::vector<std::string> items;
    for (std::size_t i = first; i < out.size(); ++i) items.push_back(FormatRule(out[i]));
    DeprecationNote(variable, value, Join(items, ","));
  };
  if (backend == "host") {
    std::optional<std::string> algorithm;
    COMMKIT_ASSIGN_OR_RETURN(algorithm,
                             EnvChoice("COMMKIT_HOST_ALGORITHM", {"auto", "ring", "halving_doubling", "hierarchical"}));
    if (algorithm && *algorithm != "auto") {
      const std::size_t first = out.size();
      out.push_back(Legacy(backend, CollectiveKind::kAllreduce, 0, kNoLimit, *ParseCollectiveAlgorithm(*algorithm),
                           "COMMKIT_HOST_ALGORITHM", *algorithm));
      note("COMMKIT_HOST_ALGORITHM", *algorithm, first);
    }
    std::optional<std::int64_t> flat;
    COMMKIT_ASSIGN_OR_RETURN(flat, EnvInt("COMMKIT_HOST_FLAT_BYTES", 0, std::int64_t{1} << 30));
    if (flat) {
      const std::size_t first = out.size();
      const auto upto = static_cast<std::size_t>(*flat) + 1;  // flat up to and including the value
      const std::string value = StrCat(*flat);
      for (CollectiveKind c : {CollectiveKind::kAllreduce, CollectiveKind::kReduce}) {
        out.push_back(Legacy(backend, c, 0, upto, CollectiveAlgorithm::kFlat, "COMMKIT_HOST_FLAT_BYTES", value));
        out.push_back(
            Legacy(backend, c, upto, kNoLimit, CollectiveAlgorithm::kSliced, "COMMKIT_HOST_FLAT_BYTES", value));
      }
      note("COMMKIT_HOST_FLAT_BYTES", value, first);
    }
  } else if (backend == "gloo") {
    std::optional<std::string> algorithm;
    auto v = EnvChoice("COMMKIT_GLOO_ALGORITHM", {"auto", "ring", "halving_doubling", "bcube"});
    if (!v.ok()) return v.status().WithContext("COMMKIT_GLOO_ALGORITHM selects Gloo's all-reduce algorithm");
    algorithm = *v;
    if (algorithm && *algorithm != "auto") {
      const std::size_t first = out.size();
      out.push_back(Legacy(backend, CollectiveKind::kAllreduce, 0, kNoLimit, *ParseCollectiveAlgorithm(*algorithm),
                           "COMMKIT_GLOO_ALGORITHM", *algorithm));
      note("COMMKIT_GLOO_ALGORITHM", *algorithm, first);
    }
  }
  return out;
}

NetworkLink ProbedNetworkLink() {
  // The probe reads sysfs (and the RDMA tree for IB rates); no GPU libraries are loaded for it.
  static std::once_flag once;
  static topology::LinkCost* probed = nullptr;
  std::call_once(once, [] {
    topology::ProbeOptions options;
    options.nvml = false;
    options.cuda = false;
    options.hwloc = false;
    options.libfabric = false;
    auto report = topology::ProbeTopology(*SystemView::Live(), options);
    if (!report.ok()) return;
    probed = new topology::LinkCost(topology::ClusterShapeFromTopology(report->topology, {2, 1}).inter);
  });
  NetworkLink link;
  const topology::LinkCost cost = probed != nullptr ? *probed : topology::DefaultLinkCost(topology::LinkClass::kNetwork);
  link.beta_Bps = cost.beta_Bps;
  link.alpha_s = cost.alpha_s;
  link.derivation = probed != nullptr ? cost.derivation : StrCat("topology probe failed: ", cost.derivation);
  return link;
}

}  // namespace commkit::tune
