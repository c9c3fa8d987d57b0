// Cost-model predictions next to measurements: all-reduce rows get them (Gloo on the TCP loopback
// link, others on shared memory), other collectives do not, and they reach the JSON lines.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/bench/predict.h"

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

}  // namespace
}  // namespace commkit::bench
