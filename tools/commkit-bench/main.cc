// commkit-bench: nccl-tests style size sweeps of one collective over commkit process groups, with
// --compare across backends and --raw library baselines. See docs/benchmarks.md.
//
// Exit codes: 0 success, 1 runtime error, 2 bad arguments (also an unknown backend), 3 results verified
// wrong (#wrong > 0), 4 a requested backend cannot run on this machine (e.g. -B nccl without a GPU;
// the reason is printed).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "commkit/bench/predict.h"
#include "commkit/bench/raw.h"
#include "commkit/bench/report.h"
#include "commkit/bench/reproduce.h"
#include "commkit/bench/runner.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/launch_env.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/process_group.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/strings.h"
#include "commkit/bench/device.h"

namespace commkit::bench {
namespace {

struct RankOutcome {
  Status status;
  std::vector<ResultRow> rows;
};

void ProgressBar(std::size_t done, std::size_t total, std::string_view what) {
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  std::fprintf(stderr, "\r%-14s [%s%s] %zu/%zu sizes", std::string(what).c_str(), std::string(filled, '=').c_str(),
               std::string(kWidth - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\r%*s\r", 14 + kWidth + 24, "");
  std::fflush(stderr);
}

// Where each backend's buffers live (host or device), from the registry. InvalidArgument for an
// unknown name (exit 2), Unavailable with the reason for one that cannot run here (exit 4).
Result<std::vector<MemoryKind>> ResolveBackends(const BenchOptions& o) {
  std::vector<MemoryKind> memory;
  const std::vector<BackendInfo> known = Registry::Default().List();
  std::vector<std::string> names;
  for (const BackendInfo& info : known) names.push_back(info.name);
  for (const std::string& name : o.backends) {
    if (name == "auto") {
      memory.push_back(MemoryKind::kHost);
      continue;
    }
    auto it = std::find_if(known.begin(), known.end(), [&](const BackendInfo& b) { return b.name == name; });
    if (it == known.end()) {
      return Status::InvalidArgument(StrCat("commkit-bench: unknown backend '", name, "'; this build knows ",
                                            Join(names, ", "), " and auto"));
    }
    if (!it->available) {
      return Status::Unavailable(StrCat("commkit-bench: backend '", name, "' cannot run on this machine: ",
                                        it->reason));
    }
    if (it->memory == MemoryKind::kDevice) {
      if (Status s = Device::Probe(); !s.ok()) {
        return Status::Unavailable(StrCat("commkit-bench: backend '", name, "' needs device memory: ", s.message()));
      }
    }
    memory.push_back(it->memory);
  }
  const bool any_device = std::find(memory.begin(), memory.end(), MemoryKind::kDevice) != memory.end();
  if (o.graph_launches > 0 && !any_device) {
    return Status::InvalidArgument("commkit-bench: -G (CUDA graph) needs a device backend such as -B nccl");
  }
  if (!o.raw.empty()) {
    const bool first_device = memory[0] == MemoryKind::kDevice;
    if ((o.raw == "nccl") != first_device) {
      return Status::InvalidArgument(StrCat("commkit-bench: --raw ", o.raw, " runs on the first backend's buffers (",
                                            o.backends[0], ": ", ToString(memory[0]), " memory); ",
                                            first_device ? "use --raw nccl" : "--raw nccl needs -B nccl"));
    }
  }
  return memory;
}

// Runs every backend (and the raw baseline) of the options on this rank. Collective over the ranks.
RankOutcome RunRank(const std::shared_ptr<Store>& store, int rank, int nranks, int local_rank,
                    const BenchOptions& o, const std::vector<MemoryKind>& memory) {
  RankOutcome out;
  const bool show_progress = rank == 0 && o.progress && ProgressAllowed(CurrentEnvironment(), isatty(STDERR_FILENO) != 0);
  // Device backends: this rank's GPU, and a host-memory group for barriers and the reductions of
  // times and wrong counts (device groups take device buffers only).
  std::unique_ptr<Device> device;
  std::unique_ptr<ProcessGroup> control;
  if (std::find(memory.begin(), memory.end(), MemoryKind::kDevice) != memory.end()) {
    auto opened = Device::Open(local_rank);
    if (!opened.ok()) {
      out.status = opened.status();
      return out;
    }
    device = std::move(*opened);
    ProcessGroupOptions cgo;
    cgo.name = "bench-control";
    cgo.timeout = std::chrono::seconds(o.timeout_s);
    cgo.local_rank = local_rank;
    auto made = ProcessGroup::Create(std::make_shared<PrefixStore>("bench/control/", store), rank, nranks, cgo);
    if (!made.ok()) {
      out.status = made.status();
      return out;
    }
    control = std::move(*made);
  }
  for (std::size_t bi = 0; bi < o.backends.size(); ++bi) {
    const std::string& backend = o.backends[bi];
    const bool on_device = memory[bi] == MemoryKind::kDevice;
    ProcessGroupOptions pgo;
    pgo.backend = backend;
    pgo.name = StrCat("bench-", backend);
    pgo.timeout = std::chrono::seconds(o.timeout_s);
    pgo.local_rank = local_rank;
    pgo.check_mismatch = o.mismatch_check;
    if (on_device) pgo.device = device->index();  // the GPU the buffers are on
    auto group = ProcessGroup::Create(std::make_shared<PrefixStore>(StrCat("bench/", bi, "/"), store), rank,
                                      nranks, pgo);
    if (!group.ok()) {
      out.status = group.status();
      return out;
    }
    SweepOptions sweep;
    if (on_device) {
      sweep.device = device.get();
      sweep.control = control.get();
    }
    if (show_progress) sweep.progress = [&](std::size_t d, std::size_t t) { ProgressBar(d, t, backend); };
    auto rows = RunSweep(**group, o, sweep);
    if (!rows.ok()) {
      out.status = rows.status();
      return out;
    }
    out.rows.insert(out.rows.end(), rows->begin(), rows->end());
    if (bi == 0 && !o.raw.empty()) {
      auto raw = MakeRawCollective(o.raw, o, rank, nranks, std::make_shared<PrefixStore>("bench/raw/", store),
                                   sweep.device);
      if (!raw.ok()) {
        out.status = raw.status();
        return out;
      }
      sweep.raw = raw->get();
      if (show_progress) sweep.progress = [&](std::size_t d, std::size_t t) { ProgressBar(d, t, (*raw)->label); };
      auto raw_rows = RunSweep(**group, o, sweep);
      if (!raw_rows.ok()) {
        out.status = raw_rows.status();
        return out;
      }
      out.rows.insert(out.rows.end(), raw_rows->begin(), raw_rows->end());
    }
  }
  return out;
}

// `count` ranks as threads of this process: ranks first_rank.., local ranks first_local.. (one GPU
// each for device backends). Returns the outcomes in rank order.
std::vector<RankOutcome> RunThreads(const std::shared_ptr<Store>& store, int first_rank, int count, int nranks,
                                    int first_local, const BenchOptions& o, const std::vector<MemoryKind>& memory) {
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(count));
  if (count == 1) {
    outcomes[0] = RunRank(store, first_rank, nranks, first_local, o, memory);
    return outcomes;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      outcomes[static_cast<std::size_t>(t)] = RunRank(store, first_rank + t, nranks, first_local + t, o, memory);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

// The first error of the outcomes (OK when none).
Status FirstError(const std::vector<RankOutcome>& outcomes) {
  for (const RankOutcome& oc : outcomes) {
    if (!oc.status.ok()) return oc.status;
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto parsed = ParseBenchArgs(args);
  if (!parsed.ok()) {
    if (parsed.status().code() == StatusCode::kAborted) {
      std::cout << parsed.status().message();
      return 0;
    }
    std::cerr << parsed.status().message() << "\n";
    return 2;
  }
  const BenchOptions& o = *parsed;
  // How to run this again: launcher, result-relevant environment, argv (reproduce.h).
  const std::string reproduce =
      ReproduceCommand({.argv = args, .env = CurrentEnvironment(), .local = o.local_ranks > 0, .as_root = geteuid() == 0});

  if (o.plan) {
    // What the selection table runs at each size, for this job's rank count; nothing is measured.
    int ranks = o.local_ranks;
    if (ranks == 0) {
      auto launch = DetectLaunchEnvironment();
      ranks = launch.ok() ? launch->world_size * o.ranks_per_process : o.ranks_per_process;
    }
    auto plan = PlanOutput(o, ranks);
    if (!plan.ok()) {
      std::cerr << plan.status().message() << "\n";
      return 2;
    }
    std::cout << *plan << std::flush;
    return 0;
  }

  auto memory = ResolveBackends(o);
  if (!memory.ok()) {
    std::cerr << memory.status().message() << "\n";
    return memory.status().code() == StatusCode::kUnavailable ? 4 : 2;
  }

  // The job: ranks as threads over one HashStore (--local), or this process's ranks of a launched job.
  std::shared_ptr<Store> job_store;
  int first_rank = 0, count = 0, nranks = 0, first_local = 0, world_size = 1;
  bool print = false;
  if (o.local_ranks > 0) {
    nranks = count = o.local_ranks;
    job_store = std::make_shared<HashStore>();
    print = true;
  } else {
    auto rdzv = RendezvousFromEnvironment();
    if (!rdzv.ok()) {
      std::cerr << "commkit-bench: " << rdzv.status().ToString()
                << "\n(launch with commkit-run, mpirun or srun, or use --local N)\n";
      return 1;
    }
    // -g G: G ranks per process, numbered process-major so that a node's ranks are contiguous.
    const int g = o.ranks_per_process;
    nranks = rdzv->info.world_size * g;
    first_rank = rdzv->info.rank * g;
    first_local = rdzv->info.local_rank * g;
    count = g;
    world_size = rdzv->info.world_size;
    job_store = rdzv->store;
    print = rdzv->info.rank == 0;
  }
  auto run = [&](const BenchOptions& opts, const std::string& prefix, std::vector<ResultRow>& out) -> bool {
    std::vector<RankOutcome> outcomes = RunThreads(std::make_shared<PrefixStore>(prefix, job_store), first_rank, count,
                                                   nranks, first_local, opts, *memory);
    if (Status s = FirstError(outcomes); !s.ok()) {
      std::cerr << s.ToString() << "\n" << std::flush;
      // Under mpirun, stop the other ranks rather than hang in MPI_Finalize waiting for them.
      if (world_size > 1) AbortMpiOnError(1);
      return false;
    }
    out = std::move(outcomes[0].rows);
    return true;
  };

  if (o.calibrate) {
    // Every algorithm of every backend, forced through the selection table, in interleaved rounds
    // (a slow stretch of the machine hits every algorithm alike); then one fit per (backend,
    // algorithm, size piece) of each size's median into the cache.
    struct Forced {
      std::string backend;
      CollectiveAlgorithm algorithm;
      std::vector<ResultRow> rows;
    };
    const CollectiveKind kind = Describe(o.collective).kind;
    std::vector<Forced> forced;
    for (const std::string& backend : o.backends) {
      const std::string name = backend == "auto" ? AutoBackendName() : backend;
      const std::vector<CollectiveAlgorithm> algorithms = tune::Algorithms(name, kind, {nranks, nranks, 1});
      for (CollectiveAlgorithm algorithm : algorithms) forced.push_back({name, algorithm, {}});
    }
    if (forced.empty()) {
      std::cerr << "commkit-bench --calibrate: no backend of " << Join(o.backends, ",") << " has an algorithm to choose for "
                << ToString(kind) << " at " << nranks << " ranks on one node (docs/tuning.md)\n";
      return 2;
    }
    int run_index = 0;
    for (int round = 0; round < o.calibrate_repeats; ++round) {
      for (Forced& f : forced) {
        BenchOptions opts = o;
        opts.backends = {f.backend};
        opts.raw.clear();
        opts.predict = "off";
        opts.calibrate = false;
        tune::SetProcessSpec(StrCat(f.backend, ".", ToString(kind), ":*:", ToString(f.algorithm)));
        std::vector<ResultRow> rows;
        const bool ok = run(opts, StrCat("calibrate/", run_index++, "/"), rows);
        tune::SetProcessSpec(std::nullopt);
        if (!ok) return 1;
        f.rows.insert(f.rows.end(), rows.begin(), rows.end());
      }
    }
    tune::Calibration calibration;
    std::string summary;
    for (const Forced& f : forced)
      summary += AddCalibrationFits(f.backend, kind, f.algorithm, nranks, f.rows, calibration);
    if (!print) return 0;
    auto saved = SaveCalibrationMerged(calibration);
    if (!saved.ok()) {
      std::cerr << saved.status().message() << "\n";
      return 1;
    }
    std::cout << summary << "# calibration written to " << *saved << " (safe to delete)\n" << std::flush;
    return 0;
  }

  std::vector<ResultRow> rows;
  if (!run(o, "", rows)) return 1;
  if (print) {
    std::string model;
    if (o.collective == BenchCollective::kAllreduce && o.predict != "off") {
      PredictionModel m = MakePredictionModel(o.predict == "measure");
      AddPredictions(m, rows);
      model = m.description;
    }
    for (ResultRow& r : rows) r.reproduce = reproduce;
    std::string text = RenderResults(o, rows, reproduce, nranks);
    if (!model.empty() && o.format == OutputFormat::kTable) text += PredictionTable(rows, model);
    if (o.output_path.empty()) {
      std::cout << text << std::flush;
    } else {
      std::ofstream f(o.output_path);
      f << text;
      if (!f) {
        std::cerr << "commkit-bench: cannot write " << o.output_path << "\n";
        return 1;
      }
    }
  }
  return TotalWrong(rows) > 0 ? 3 : 0;
}

}  // namespace
}  // namespace commkit::bench

int main(int argc, char** argv) { return commkit::bench::Main(argc, argv); }
