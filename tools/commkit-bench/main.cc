// commkit-bench: nccl-tests style size sweeps of one collective over commkit process groups, with
// --compare across backends and --raw library baselines. See docs/benchmarks.md.
//
// Exit codes: 0 success, 1 runtime error, 2 bad arguments, 3 results verified wrong (#wrong > 0).
#include <unistd.h>

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
#include "commkit/comm/rendezvous.h"
#include "commkit/common/strings.h"

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

// Runs every backend (and the raw baseline) of the options on this rank. Collective over the ranks.
RankOutcome RunRank(const std::shared_ptr<Store>& store, int rank, int nranks, int local_rank,
                    const BenchOptions& o) {
  RankOutcome out;
  const bool show_progress = rank == 0 && o.progress && isatty(STDERR_FILENO);
  for (std::size_t bi = 0; bi < o.backends.size(); ++bi) {
    const std::string& backend = o.backends[bi];
    ProcessGroupOptions pgo;
    pgo.backend = backend;
    pgo.name = StrCat("bench-", backend);
    pgo.timeout = std::chrono::seconds(o.timeout_s);
    pgo.local_rank = local_rank;
    pgo.check_mismatch = o.mismatch_check;
    auto group = ProcessGroup::Create(std::make_shared<PrefixStore>(StrCat("bench/", bi, "/"), store), rank,
                                      nranks, pgo);
    if (!group.ok()) {
      out.status = group.status();
      return out;
    }
    SweepOptions sweep;
    if (show_progress) sweep.progress = [&](std::size_t d, std::size_t t) { ProgressBar(d, t, backend); };
    auto rows = RunSweep(**group, o, sweep);
    if (!rows.ok()) {
      out.status = rows.status();
      return out;
    }
    out.rows.insert(out.rows.end(), rows->begin(), rows->end());
    if (bi == 0 && !o.raw.empty()) {
      auto raw = MakeRawCollective(o.raw, o, rank, nranks, std::make_shared<PrefixStore>("bench/raw/", store));
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

  std::vector<ResultRow> rows;
  int nranks = 0;
  bool print = false;
  if (o.local_ranks > 0) {
    nranks = o.local_ranks;
    auto store = std::make_shared<HashStore>();
    std::vector<RankOutcome> outcomes(static_cast<std::size_t>(nranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      threads.emplace_back([&, r] { outcomes[static_cast<std::size_t>(r)] = RunRank(store, r, nranks, r, o); });
    }
    for (auto& t : threads) t.join();
    for (const RankOutcome& oc : outcomes) {
      if (!oc.status.ok()) {
        std::cerr << oc.status.ToString() << "\n";
        return 1;
      }
    }
    rows = outcomes[0].rows;
    print = true;
  } else {
    auto rdzv = RendezvousFromEnvironment();
    if (!rdzv.ok()) {
      std::cerr << "commkit-bench: " << rdzv.status().ToString()
                << "\n(launch with commkit-run, mpirun or srun, or use --local N)\n";
      return 1;
    }
    nranks = rdzv->info.world_size;
    RankOutcome oc = RunRank(rdzv->store, rdzv->info.rank, nranks, rdzv->info.local_rank, o);
    if (!oc.status.ok()) {
      std::cerr << oc.status.ToString() << "\n" << std::flush;
      // Under mpirun, stop the other ranks rather than hang in MPI_Finalize waiting for them.
      if (nranks > 1) AbortMpiOnError(1);
      return 1;
    }
    rows = std::move(oc.rows);
    print = rdzv->info.rank == 0;
  }
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
