// gpudoctor --bench's local all-reduce: ranks as threads over a HashStore, results checked, the cost
// model's prediction attached, the budget honoured, bad options rejected. No timing thresholds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/diagnostics/local_bench.h"

namespace commkit::diagnostics {
namespace {

TEST(LocalBench, HostAndGlooAllReduceAreCorrectAndPredicted) {
  LocalBenchOptions o;
  o.sizes = {1 << 10, 64 << 10};
  o.calibrate = false;  // the model's documented defaults: no host timing in a unit test
  o.budget = std::chrono::seconds(60);
  auto rep = RunLocalBench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  // host is built in; gloo may be absent from a build: then it is a note, not an error.
  ASSERT_GE(rep->rows.size(), 2u) << rep->ToText();
  for (const LocalBenchRow& r : rep->rows) {
    EXPECT_TRUE(r.correct) << r.backend << " " << r.bytes;
    EXPECT_GT(r.iters, 0);
    EXPECT_GT(r.time_us, 0);
    EXPECT_GT(r.busbw_gbps, 0);
    EXPECT_GT(r.pred_busbw_gbps, 0) << r.backend;
    EXPECT_FALSE(r.pred_algorithm.empty());
  }
  EXPECT_EQ(rep->rows[0].backend, "host");
  EXPECT_EQ(rep->rows[0].bytes, 1024u);
  EXPECT_EQ(rep->rows[1].bytes, 64u << 10);
  EXPECT_EQ(rep->rows.size() == 4u, rep->notes.empty()) << rep->ToText();
  EXPECT_TRUE(rep->AllCorrect());
  auto j = nlohmann::json::parse(rep->ToJson());
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["rows"].size(), rep->rows.size());
  EXPECT_NE(rep->ToText().find("predicted GB/s"), std::string::npos);
}

TEST(LocalBench, SpentBudgetSkipsSizesWithANote) {
  LocalBenchOptions o;
  o.backends = {"host"};
  o.calibrate = false;
  o.budget = std::chrono::milliseconds(0);
  auto rep = RunLocalBench(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->rows.empty());
  ASSERT_EQ(rep->notes.size(), 1u);
  EXPECT_NE(rep->notes[0].find("host: 4 larger size(s) skipped"), std::string::npos) << rep->notes[0];
}

TEST(LocalBench, UnknownBackendIsANoteAndBadOptionsAreErrors) {
  LocalBenchOptions o;
  o.backends = {"no-such-backend"};
  o.sizes = {1024};
  o.calibrate = false;
  o.op_timeout = std::chrono::seconds(5);
  auto rep = RunLocalBench(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->rows.empty());
  ASSERT_EQ(rep->notes.size(), 1u);
  EXPECT_NE(rep->notes[0].find("no-such-backend: not run"), std::string::npos) << rep->notes[0];

  LocalBenchOptions bad;
  bad.ranks = 1;
  EXPECT_FALSE(RunLocalBench(bad).ok());
  bad.ranks = 2;
  bad.sizes = {1023};
  EXPECT_FALSE(RunLocalBench(bad).ok());
  bad.sizes = {};
  EXPECT_FALSE(RunLocalBench(bad).ok());
  bad.sizes = {1024};
  bad.backends = {};
  EXPECT_FALSE(RunLocalBench(bad).ok());
}

}  // namespace
}  // namespace commkit::diagnostics
