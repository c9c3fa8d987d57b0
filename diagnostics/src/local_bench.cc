#include "commkit/diagnostics/local_bench.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commkit/bench/collective.h"
#include "commkit/bench/predict.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/process_group.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics {
namespace {

using Clock = std::chrono::steady_clock;

// Enough traffic per size to average out scheduling noise, few enough calls to stay short.
int ItersFor(std::size_t bytes) {
  const std::size_t target = 64u << 20;
  return static_cast<int>(std::clamp<std::size_t>(target / std::max<std::size_t>(bytes, 1), 3, 100));
}

struct RankResult {
  Status status;
  std::vector<double> seconds;  // per completed size: mean time per call
  std::vector<bool> correct;
  bool budget_cut = false;
};

Status RunOp(ProcessGroup& g, const void* send, void* recv, std::size_t count, DataType t, ReduceOp op,
             std::chrono::milliseconds timeout) {
  COMMKIT_ASSIGN_OR_RETURN(ProcessGroup::WorkPtr work, g.Allreduce(send, recv, count, t, op));
  return work->Wait(timeout);
}

RankResult RunRank(const std::shared_ptr<Store>& store, const std::string& backend, int rank, const LocalBenchOptions& o) {
  RankResult out;
  ProcessGroupOptions po;
  po.backend = backend;
  po.name = "gpudoctor-bench";
  po.timeout = o.op_timeout;
  po.check_mismatch = false;
  auto group = ProcessGroup::Create(store, rank, o.ranks, po);
  if (!group.ok()) {
    out.status = group.status();
    return out;
  }
  ProcessGroup& g = **group;
  const Clock::time_point start = Clock::now();
  const float expected = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
  for (std::size_t bytes : o.sizes) {
    // The ranks agree whether the budget allows another size (each rank's clock differs slightly).
    std::int32_t over = Clock::now() - start >= o.budget ? 1 : 0, any_over = 0;
    if (Status s = RunOp(g, &over, &any_over, 1, DataType::kInt32, ReduceOp::Max(), o.op_timeout); !s.ok()) {
      out.status = s;
      return out;
    }
    if (any_over != 0) {
      out.budget_cut = true;
      break;
    }
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> send(count, static_cast<float>(rank + 1)), recv(count, 0.0f);
    const int iters = ItersFor(bytes);
    Status s = RunOp(g, send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::Sum(), o.op_timeout);  // warm-up
    std::int32_t token = 0, sink = 0;
    if (s.ok()) s = RunOp(g, &token, &sink, 1, DataType::kInt32, ReduceOp::Max(), o.op_timeout);  // barrier
    std::fill(recv.begin(), recv.end(), 0.0f);
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; s.ok() && i < iters; ++i)
      s = RunOp(g, send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::Sum(), o.op_timeout);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    if (!s.ok()) {
      out.status = s;
      return out;
    }
    out.seconds.push_back(seconds);
    out.correct.push_back(std::all_of(recv.begin(), recv.end(), [&](float v) { return v == expected; }));
  }
  return out;
}

}  // namespace

bool LocalBenchReport::AllCorrect() const {
  return std::all_of(rows.begin(), rows.end(), [](const LocalBenchRow& r) { return r.correct; });
}

Result<LocalBenchReport> RunLocalBench(const LocalBenchOptions& o) {
  if (o.backends.empty()) return Status::InvalidArgument("gpudoctor --bench: no backend to run");
  if (o.sizes.empty()) return Status::InvalidArgument("gpudoctor --bench: no size to run");
  if (o.ranks < 2) return Status::InvalidArgument(StrCat("gpudoctor --bench: needs at least 2 ranks, got ", o.ranks));
  for (std::size_t b : o.sizes)
    if (b == 0 || b % sizeof(float) != 0)
      return Status::InvalidArgument(StrCat("gpudoctor --bench: size ", b, " is not a positive multiple of 4 bytes (float32)"));

  LocalBenchReport report;
  report.ranks = o.ranks;
  // commkit-bench's formulas and prediction (bench/collective.h, bench/predict.h), so both tools agree.
  const bench::PredictionModel model = bench::MakePredictionModel(o.calibrate);
  report.model = model.description;

  for (const std::string& backend : o.backends) {
    auto store = std::make_shared<HashStore>();
    std::vector<RankResult> results(static_cast<std::size_t>(o.ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < o.ranks; ++r)
      threads.emplace_back([&, r] { results[static_cast<std::size_t>(r)] = RunRank(store, backend, r, o); });
    for (auto& t : threads) t.join();
    std::size_t done = o.sizes.size();
    std::string error;
    for (const RankResult& rr : results) {
      done = std::min(done, rr.seconds.size());
      if (!rr.status.ok() && error.empty()) error = rr.status.ToString();
    }
    if (!error.empty())
      report.notes.push_back(done == 0 ? StrCat(backend, ": not run: ", error) : StrCat(backend, ": stopped after ", done, " size(s): ", error));
    else if (done < o.sizes.size())
      report.notes.push_back(StrCat(backend, ": ", o.sizes.size() - done, " larger size(s) skipped: the ",
                                    o.budget.count(), " ms budget was spent"));
    for (std::size_t i = 0; i < done; ++i) {
      LocalBenchRow row;
      row.backend = backend;
      row.bytes = o.sizes[i];
      row.iters = ItersFor(row.bytes);
      row.correct = true;
      double seconds = 0;
      for (const RankResult& rr : results) {
        seconds = std::max(seconds, rr.seconds[i]);
        row.correct = row.correct && rr.correct[i];
      }
      row.time_us = seconds * 1e6;
      row.busbw_gbps = bench::ComputeBandwidth(bench::BenchCollective::kAllreduce, row.bytes, seconds, o.ranks).busbw_gbps;
      if (auto p = bench::PredictAllreduce(model, backend, o.ranks, row.bytes)) {
        row.pred_busbw_gbps = p->busbw_gbps;
        row.pred_algorithm = p->algorithm;
      }
      report.rows.push_back(std::move(row));
    }
  }
  return report;
}

std::string LocalBenchReport::ToText() const {
  std::ostringstream out;
  out << "\nLocal all-reduce (" << ranks << " ranks as threads, float32 sum; busbw = algbw * 2(n-1)/n):\n";
  out << "  backend        size   iters     time_us  busbw GB/s  predicted GB/s  model algorithm     check\n";
  for (const LocalBenchRow& r : rows) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-8s %10s  %6d  %10.1f  %10.3f  %14.3f  %-18s  %s\n", r.backend.c_str(),
                  HumanBytes(static_cast<double>(r.bytes)).c_str(), r.iters, r.time_us, r.busbw_gbps, r.pred_busbw_gbps,
                  r.pred_algorithm.empty() ? "-" : r.pred_algorithm.c_str(), r.correct ? "ok" : "WRONG");
    out << line;
  }
  for (const std::string& n : notes) out << "  note: " << n << "\n";
  out << "  prediction: " << model << "\n";
  return out.str();
}

std::string LocalBenchReport::ToJson() const {
  nlohmann::json j;
  j["ranks"] = ranks;
  j["model"] = model;
  j["notes"] = notes;
  j["rows"] = nlohmann::json::array();
  for (const LocalBenchRow& r : rows)
    j["rows"].push_back({{"backend", r.backend},
                         {"bytes", r.bytes},
                         {"iters", r.iters},
                         {"time_us", r.time_us},
                         {"busbw_gbps", r.busbw_gbps},
                         {"pred_busbw_gbps", r.pred_busbw_gbps},
                         {"pred_algorithm", r.pred_algorithm},
                         {"correct", r.correct}});
  return j.dump(2);
}

}  // namespace commkit::diagnostics
