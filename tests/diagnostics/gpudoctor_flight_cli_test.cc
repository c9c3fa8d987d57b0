// gpudoctor flight on real dumps (ranks as threads, one skips a collective: it is named with the
// operation), its exit codes and JSON; gpudoctor --format prometheus on a replayed snapshot.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../comm/pg_harness.h"
#include "commkit/comm/flight_recorder.h"
#include "test_support.h"

namespace commkit {
namespace {

using namespace std::chrono_literals;
using commkit::testing::BinDir;
using commkit::testing::RunCommand;
using commkit::testing::TestDataDir;

std::string Doctor() { return (BinDir() / "gpudoctor").string(); }

TEST(GpudoctorFlight, NamesTheRankThatSkippedACollective) {
  commkit::testing::TempDir dir;
  {
    commkit::testing::ScopedEnv env("COMMKIT_FLIGHT_RECORDER_DIR", dir.path().string());
    std::atomic<int> finished{0};
    commkit::testing::RunRanks("host", 3, [&](ProcessGroup& pg) {
      std::vector<float> buf(8, 1.0f);
      COMMKIT_EXPECT_OK((*pg.Barrier())->Wait());
      COMMKIT_EXPECT_OK((*pg.Allreduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Wait());
      if (pg.rank() == 1) {  // skips the broadcast, then is asked for its record
        const auto deadline = std::chrono::steady_clock::now() + 60s;
        while (finished.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
        EXPECT_TRUE(pg.DumpFlightRecord().ok());
        return;
      }
      auto w = pg.Broadcast(buf.data(), 8, DataType::kFloat32, 0, {.timeout = 2s});
      ASSERT_TRUE(w.ok());
      EXPECT_FALSE((*w)->Wait().ok());
      finished.fetch_add(1);
    }, {.timeout = 20s});
  }
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(std::filesystem::exists(dir.path() / ("world-rank" + std::to_string(r) + ".json"))) << r;

  auto text = RunCommand(Doctor() + " flight " + dir.path().string() + " 2>&1");
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_NE(text.output.find("rank 1 never called broadcast #3 (f32 x 8, root 0), which ranks 0, 2 wait in"),
            std::string::npos) << text.output;

  // explain reads the same dumps (told apart from logs by their top-level key) and gives the verdict.
  const std::string dumps = (dir.path() / "world-rank0.json").string() + " " + (dir.path() / "world-rank1.json").string() +
                            " " + (dir.path() / "world-rank2.json").string();
  auto explained = RunCommand(Doctor() + " explain " + dumps + " 2>&1");
  EXPECT_EQ(explained.exit_code, 1) << explained.output;
  EXPECT_NE(explained.output.find("rank 1 never called broadcast #3"), std::string::npos) << explained.output;

  auto json = RunCommand(Doctor() + " flight --json " + (dir.path() / "world-rank0.json").string() + " " +
                         (dir.path() / "world-rank1.json").string() + " " + (dir.path() / "world-rank2.json").string());
  EXPECT_EQ(json.exit_code, 1) << json.output;
  auto doc = nlohmann::json::parse(json.output);
  EXPECT_EQ(doc["schema"], "commkit.flight_verdict/1");
  EXPECT_EQ(doc["exit_code"], 1);
  EXPECT_EQ(doc["groups"][0]["verdict"], "stopped");
  EXPECT_EQ(doc["groups"][0]["findings"][0]["ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(doc["groups"][0]["findings"][0]["sequence"], 3);
  EXPECT_EQ(doc["groups"][0]["ranks"][1]["last_operation"], "allreduce #2 (f32 x 8, sum)");
}

TEST(GpudoctorFlight, ExitCodes) {
  commkit::testing::TempDir dir;
  FlightDump d;
  d.version = 1;
  d.world_size = 1;
  d.group = "world";
  FlightRecord e;
  e.sequence = 1;
  e.state = FlightState::kCompleted;
  d.entries.push_back(e);
  auto ok = dir.Write("ok/world-rank0.json", FlightDumpToJson(d));
  EXPECT_EQ(RunCommand(Doctor() + " flight " + ok.string()).exit_code, 0);
  auto bad = dir.Write("bad.json", "{\"commkit_flight_recorder\": {\"version\": 1,");
  auto r = RunCommand(Doctor() + " flight " + bad.string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("bad.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not valid JSON"), std::string::npos) << r.output;
  EXPECT_EQ(RunCommand(Doctor() + " flight /nonexistent/dump.json 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(Doctor() + " flight /dev/zero 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(Doctor() + " flight 2>/dev/null").exit_code, 3);  // command-line error, as for every command
}

TEST(GpudoctorPrometheus, ChecksAsGauges) {
  const std::string snap = (TestDataDir() / "gpudoctor" / "host-xid79").string();
  auto r = RunCommand(Doctor() + " --format prometheus --from " + snap + " --only kernel.xid,shm 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  std::map<std::string, std::string> samples;  // series -> value
  std::map<std::string, std::string> types;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      auto rest = line.substr(7);
      types[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    auto space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    const std::string series = line.substr(0, space);
    const std::string family = series.substr(0, series.find('{'));
    EXPECT_TRUE(types.count(family)) << "sample before its # TYPE line: " << line;
    samples[series] = line.substr(space + 1);
  }
  EXPECT_EQ(types["gpudoctor_check"], "gauge");
  EXPECT_EQ(samples["gpudoctor_check{id=\"kernel.xid\",category=\"kernel\",status=\"fail\"}"], "1") << r.output;
  EXPECT_EQ(samples["gpudoctor_checks{status=\"fail\"}"], "1") << r.output;
  EXPECT_EQ(samples["gpudoctor_exit_code"], "2");
  EXPECT_TRUE(samples.count("gpudoctor_last_run_timestamp_seconds"));
  // As many check series as checks in the JSON report.
  auto j = RunCommand(Doctor() + " --format json --from " + snap + " --only kernel.xid,shm 2>/dev/null");
  auto doc = nlohmann::json::parse(j.output);
  std::size_t checks = 0;
  for (const auto& [series, value] : samples) checks += series.rfind("gpudoctor_check{", 0) == 0 ? 1 : 0;
  EXPECT_EQ(checks, doc["checks"].size());
  EXPECT_EQ(RunCommand(Doctor() + " --format yaml 2>/dev/null").exit_code, 3);
  EXPECT_EQ(RunCommand(Doctor() + " --format prometheus --bench 2>/dev/null").exit_code, 3);
}

}  // namespace
}  // namespace commkit
