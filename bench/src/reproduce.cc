#include "commkit/bench/reproduce.h"

#include <algorithm>
#include <array>

#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

constexpr std::array<std::string_view, 5> kTuningPrefixes = {"COMMKIT_", "NCCL_", "OMPI_MCA_", "GLOO_", "UCX_"};

// Set by a launcher for its children, not by the user: reproducing them would be wrong or harmful.
constexpr std::array<std::string_view, 2> kLauncherSet = {"COMMKIT_LAUNCHER", "COMMKIT_STORE_HOSTED"};
// Open MPI's mpirun (ORTE; PRRTE in Open MPI 5) passes these to every process; the user's own MCA
// parameters (--mca k v, OMPI_MCA_k in mpirun's environment) arrive as OMPI_MCA_* too and are kept.
constexpr std::array<std::string_view, 7> kOmpiInternal = {
    "orte", "prte", "ess", "pmix", "initial_wdir", "mpi_oversubscribe", "shmem_RUNTIME_QUERY_hint"};
constexpr std::array<std::string_view, 4> kSecretWords = {"TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"};

bool IsTuningVariable(std::string_view name) {
  if (std::none_of(kTuningPrefixes.begin(), kTuningPrefixes.end(),
                   [&](std::string_view p) { return name.starts_with(p) && name.size() > p.size(); })) {
    return false;
  }
  if (std::find(kLauncherSet.begin(), kLauncherSet.end(), name) != kLauncherSet.end()) return false;
  const std::string upper = [&] {
    std::string u(name);
    for (char& c : u) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    return u;
  }();
  for (std::string_view word : kSecretWords) {
    if (upper.find(word) != std::string::npos) return false;
  }
  if (name.starts_with("OMPI_MCA_")) {
    const std::string_view param = name.substr(9);
    for (std::string_view p : kOmpiInternal) {
      if (param.starts_with(p)) return false;
    }
  }
  return true;
}

std::string Assignment(const std::string& name, const std::string& value) {
  return StrCat(name, "=", ShellQuote(value));
}

// The launcher's words (before the program) for `info`.
std::vector<std::string> LauncherWords(const LaunchInfo& info, bool as_root) {
  const std::string n = std::to_string(info.world_size);
  const std::string per_node = std::to_string(info.local_world_size);
  const std::string nodes = std::to_string(info.num_nodes);
  const bool multi = info.num_nodes > 1;
  const std::string node_ranks = StrCat("<0..", info.num_nodes - 1, ">");
  switch (info.launcher) {
    case Launcher::kNone: return {};
    case Launcher::kCommkitRun:
      if (!multi) return {"commkit-run", "-n", per_node, "--"};
      return {"commkit-run", "--nnodes", nodes, "--node-rank", node_ranks, "--master-addr",
              ShellQuote(info.master_addr), "--master-port", std::to_string(info.master_port), "-n", per_node, "--"};
    case Launcher::kTorchrun:
    case Launcher::kKubeflow:
    case Launcher::kAzureML:
      if (!multi) return {"torchrun", "--nnodes", "1", "--nproc-per-node", per_node, "--no-python"};
      return {"torchrun", "--nnodes", nodes, "--nproc-per-node", per_node, "--node-rank", node_ranks,
              "--master-addr", ShellQuote(info.master_addr), "--master-port", std::to_string(info.master_port),
              "--no-python"};
    case Launcher::kOpenMPI: {
      std::vector<std::string> w = {"mpirun"};
      if (as_root) w.emplace_back("--allow-run-as-root");
      w.insert(w.end(), {"-np", n});
      if (multi) w.insert(w.end(), {"--npernode", per_node});
      return w;
    }
    case Launcher::kMpichPmi: {
      std::vector<std::string> w = {"mpiexec", "-n", n};
      if (multi) w.insert(w.end(), {"-ppn", per_node});
      return w;
    }
    case Launcher::kSlurm: {
      std::vector<std::string> w = {"srun"};
      if (multi) w.insert(w.end(), {"-N", nodes});
      w.insert(w.end(), {"-n", n});
      return w;
    }
  }
  return {};
}

}  // namespace

std::vector<std::pair<std::string, std::string>> TuningVariables(const EnvMap& env) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : env) {  // EnvMap is ordered: sorted by name
    if (IsTuningVariable(name)) out.emplace_back(name, value);
  }
  return out;
}

std::string ReproduceCommand(const ReproduceInput& input) {
  LaunchInfo info;  // kNone
  if (!input.local) {
    auto detected = DetectLaunchEnvironment(input.env);
    if (detected.ok()) info = *detected;
  }
  std::vector<std::pair<std::string, std::string>> vars = TuningVariables(input.env);
  if (info.launcher == Launcher::kOpenMPI || info.launcher == Launcher::kMpichPmi ||
      info.launcher == Launcher::kSlurm) {
    // These launchers do not set the rendezvous address; a job that had it set needs it again.
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT"}) {
      if (auto it = input.env.find(name); it != input.env.end()) vars.emplace_back(name, it->second);
    }
  }

  std::vector<std::string> words;
  std::vector<std::string> launcher = LauncherWords(info, input.as_root);
  if (info.launcher == Launcher::kOpenMPI) {
    words = launcher;
    for (const auto& [name, value] : vars) {
      if (name.starts_with("OMPI_MCA_")) words.insert(words.end(), {"--mca", name.substr(9), ShellQuote(value)});
    }
    for (const auto& [name, value] : vars) {
      if (!name.starts_with("OMPI_MCA_")) words.insert(words.end(), {"-x", Assignment(name, value)});
    }
  } else {
    for (const auto& [name, value] : vars) words.push_back(Assignment(name, value));
    words.insert(words.end(), launcher.begin(), launcher.end());
  }
  for (const std::string& arg : input.argv) words.push_back(ShellQuote(arg));
  return Join(words, " ");
}

}  // namespace commkit::bench
