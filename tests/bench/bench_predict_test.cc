// Cost-model predictions next to measurements: all-reduce rows get them (Gloo on the TCP loopback
// link, others on shared memory), other collectives do not, and they reach the JSON lines.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "commkit/bench/predict.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/process_group.h"
#include "commkit/comm/tuning.h"

namespace commkit::bench {
namespace {

ResultRow Row(const std::string& backend, BenchCollective c, std::size_t bytes) {
  ResultRow r;
  r.backend = backend;
  r.collective = c;
  r.bytes = bytes;
  r.count = bytes / 4;
  r.op = "sum";
  r.nranks = 2;
  r.out_of_place.valid = true;
  r.out_of_place.time_us = 10;
  return r;
}

TEST(BenchPredict, AllreduceRowsGetTheModelsBusbwAndJsonCarriesIt) {
  PredictionModel m = MakePredictionModel(/*measure=*/false);
  EXPECT_NE(m.description.find("cost model"), std::string::npos);
  std::vector<ResultRow> rows = {Row("host", BenchCollective::kAllreduce, 8), Row("host", BenchCollective::kAllreduce, 64 << 20),
                                 Row("gloo", BenchCollective::kAllreduce, 64 << 20),
                                 Row("host", BenchCollective::kAllgather, 64 << 20)};
  AddPredictions(m, rows);
  EXPECT_GT(rows[0].pred_busbw_gbps, 0);
  EXPECT_GT(rows[1].pred_busbw_gbps, rows[0].pred_busbw_gbps) << "bandwidth grows with size";
  EXPECT_NE(rows[2].pred_busbw_gbps, rows[1].pred_busbw_gbps) << "gloo is modelled on TCP loopback, host on shared memory";
  EXPECT_FALSE(rows[1].pred_algorithm.empty());
  EXPECT_EQ(rows[3].pred_busbw_gbps, 0) << "no model for allgather";
  auto j = nlohmann::json::parse(JsonLines(rows[1]));
  EXPECT_DOUBLE_EQ(j.at("pred_busbw_gbps").get<double>(), rows[1].pred_busbw_gbps);
  EXPECT_EQ(j.at("pred_algorithm").get<std::string>(), rows[1].pred_algorithm);
  EXPECT_FALSE(nlohmann::json::parse(JsonLines(rows[3])).contains("pred_busbw_gbps"));
}

// --plan (and the predictions next to a sweep) must show what the host backend runs on this machine:
// the built-in flat/sliced boundary depends on the CPU vendor and on ranks against cores, so a plan
// that left them out showed sliced from 2 KiB on an Intel CPU whose backend ran flat to 32 KiB. Sizes
// on both sides of every built-in boundary (1, 32 and 64 KiB), at 2 and 3 ranks.
TEST(BenchPredict, PlanShowsTheAlgorithmTheHostBackendRuns) {
  for (int nranks : {2, 3}) {
    for (std::size_t bytes : {std::size_t{1} << 10, std::size_t{2} << 10, std::size_t{32} << 10,
                              std::size_t{64} << 10, std::size_t{128} << 10}) {
      BenchOptions o;
      o.backends = {"host"};
      o.format = OutputFormat::kJson;
      o.min_bytes = o.max_bytes = bytes;
      auto plan = PlanOutput(o, nranks);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const auto rows = nlohmann::json::parse(*plan);
      ASSERT_EQ(rows.size(), 1u) << *plan;
      const std::string planned = rows[0].at("algorithm").get<std::string>();
      const std::uint64_t flat = tune::RunCount("host", CollectiveAlgorithm::kFlat);
      const std::uint64_t sliced = tune::RunCount("host", CollectiveAlgorithm::kSliced);
      auto store = std::make_shared<HashStore>();
      std::vector<std::thread> threads;
      std::vector<Status> status(static_cast<std::size_t>(nranks));
      for (int r = 0; r < nranks; ++r) {
        threads.emplace_back([&, r] {
          auto g = ProcessGroup::Create(store, r, nranks, {.backend = "host", .timeout = std::chrono::seconds(30)});
          if (!g.ok()) {
            status[static_cast<std::size_t>(r)] = g.status();
            return;
          }
          std::vector<float> buf(bytes / 4, 1.0f);
          auto w = (*g)->Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum());
          status[static_cast<std::size_t>(r)] = w.ok() ? (*w)->Wait(std::chrono::seconds(30)) : w.status();
        });
      }
      for (auto& t : threads) t.join();
      for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.ToString();
      const std::uint64_t ran_flat = tune::RunCount("host", CollectiveAlgorithm::kFlat) - flat;
      const std::uint64_t ran_sliced = tune::RunCount("host", CollectiveAlgorithm::kSliced) - sliced;
      EXPECT_EQ(planned, ran_flat > ran_sliced ? "flat" : "sliced")
          << bytes << " bytes at " << nranks << " ranks: flat ran " << ran_flat << " times, sliced " << ran_sliced;
    }
  }
}

}  // namespace
}  // namespace commkit::bench
