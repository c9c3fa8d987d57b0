// The flight record analysis: synthetic dumps (all fine, a stopped rank, a diverged op, a missing
// rank, a failure on every rank, a hang inside an op), loading files and directories (malformed
// input), and end to end: ranks as threads on the host backend, one skips a collective or calls a
// different one, the failure dumps are written and the analysis names that rank and the operation.
#include "commkit/diagnostics/flight_record.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../comm/pg_harness.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

using namespace std::chrono_literals;

FlightRecord Coll(std::uint64_t seq, CollectiveKind kind = CollectiveKind::kAllreduce, std::uint64_t count = 16,
                  FlightState state = FlightState::kCompleted) {
  FlightRecord e;
  e.sequence = seq;
  e.kind = kind;
  e.count = count;
  e.state = state;
  e.enqueued_ns = static_cast<std::int64_t>(seq) * 1000;
  e.started_ns = state != FlightState::kScheduled ? e.enqueued_ns + 1 : 0;
  e.ended_ns = state == FlightState::kCompleted || state == FlightState::kFailed ? e.enqueued_ns + 2 : 0;
  if (state == FlightState::kFailed) e.error = StatusCode::kTimeout;
  return e;
}

FlightDump Dump(int rank, int size, std::vector<FlightRecord> entries, std::string group = "world") {
  FlightDump d;
  d.version = 1;
  d.rank = rank;
  d.world_size = size;
  d.group = std::move(group);
  d.backend = "gloo";
  d.host = "node" + std::to_string(rank / 2);
  d.pid = 1000 + rank;
  d.dumped_ns = 99'000'000;
  d.entries = std::move(entries);
  for (const auto& e : d.entries)
    if (!e.p2p) d.collectives = std::max(d.collectives, e.sequence);
  d.source = "rank" + std::to_string(rank) + ".json";
  return d;
}

// Ranks 0..size-1 completed #1..#n.
std::vector<FlightRecord> Completed(std::uint64_t n) {
  std::vector<FlightRecord> v;
  for (std::uint64_t s = 1; s <= n; ++s) v.push_back(Coll(s));
  return v;
}

TEST(FlightRecord, AllRanksAgree) {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(Dump(r, 4, Completed(10)));
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_EQ(v.groups.size(), 1u);
  EXPECT_TRUE(v.groups[0].findings.empty()) << v.ToText();
  EXPECT_EQ(v.ExitCode(), 0);
  EXPECT_NE(v.ToText().find("OK: the 4 ranks agree: all reached collective #10"), std::string::npos) << v.ToText();
  auto j = nlohmann::json::parse(v.ToJson());
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["groups"][0]["verdict"], "ok");
}

TEST(FlightRecord, StoppedRankIsNamedWithTheOperationItNeverCalled) {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) {
    auto entries = Completed(12);
    if (r != 2) entries.push_back(Coll(13, CollectiveKind::kAllreduce, 16, FlightState::kFailed));
    dumps.push_back(Dump(r, 4, entries));
  }
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_EQ(v.groups[0].findings.size(), 1u) << v.ToText();
  const FlightFinding& f = v.groups[0].findings[0];
  EXPECT_EQ(f.kind, FlightFindingKind::kStopped);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.others, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(f.sequence, 13u);
  EXPECT_EQ(f.operation, "allreduce #13 (f32 x 16, sum)");
  EXPECT_NE(f.message.find("rank 2 never called allreduce #13 (f32 x 16, sum), which ranks 0, 1, 3 wait in"),
            std::string::npos) << f.message;
  EXPECT_NE(f.message.find("its last collective was allreduce #12 (f32 x 16, sum), completed"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("pid 1002 on node1"), std::string::npos) << f.message;
  EXPECT_EQ(v.ExitCode(), 1);
  auto j = nlohmann::json::parse(v.ToJson());
  EXPECT_EQ(j["groups"][0]["verdict"], "stopped");
  EXPECT_EQ(j["groups"][0]["findings"][0]["ranks"], nlohmann::json::array({2}));
}

TEST(FlightRecord, DumpsTakenAtSlightlyDifferentTimesAreNotAStop) {
  // Rank 1 dumped before it entered #6, which the others completed: no one waits for it.
  std::vector<FlightDump> dumps{Dump(0, 2, Completed(6)), Dump(1, 2, Completed(5))};
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  EXPECT_TRUE(v.groups[0].findings.empty()) << v.ToText();
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("taken at different times"), std::string::npos);
}

TEST(FlightRecord, DivergedOperationNamesTheMinorityAndBothCalls) {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 3; ++r) {
    auto entries = Completed(4);
    FlightRecord e = Coll(5, r == 1 ? CollectiveKind::kBroadcast : CollectiveKind::kAllreduce, 16, FlightState::kFailed);
    e.error = StatusCode::kMismatch;
    entries.push_back(e);
    dumps.push_back(Dump(r, 3, entries));
  }
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_FALSE(v.groups[0].findings.empty());
  const FlightFinding& f = v.groups[0].findings[0];
  EXPECT_EQ(f.kind, FlightFindingKind::kDiverged);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  EXPECT_EQ(f.others, (std::vector<int>{0, 2}));
  EXPECT_EQ(f.sequence, 5u);
  EXPECT_NE(f.message.find("rank 1 called broadcast #5 (f32 x 16, root 0), while ranks 0, 2 called allreduce #5"),
            std::string::npos) << f.message;
  EXPECT_EQ(v.ExitCode(), 1);
}

TEST(FlightRecord, DifferentCountsOrPerRankCountsDiverge) {
  auto a = Completed(2), b = Completed(2);
  b[1].count = 32;
  FlightVerdict v = AnalyzeFlightDumps({Dump(0, 2, a), Dump(1, 2, b)});
  ASSERT_FALSE(v.groups[0].findings.empty());
  EXPECT_EQ(v.groups[0].findings[0].kind, FlightFindingKind::kDiverged);
  EXPECT_EQ(v.groups[0].findings[0].sequence, 2u);
  auto c = Completed(2), d = Completed(2);
  d[0].fingerprint = 77;  // same op/type/count, different v-counts
  v = AnalyzeFlightDumps({Dump(0, 2, c), Dump(1, 2, d)});
  ASSERT_FALSE(v.groups[0].findings.empty());
  EXPECT_NE(v.groups[0].findings[0].message.find("with different per-rank counts"), std::string::npos);
  // alltoallv: each rank sends its own counts; not a divergence.
  auto e = Completed(1), f = Completed(1);
  e.push_back(Coll(2, CollectiveKind::kAlltoallv, 10));
  f.push_back(Coll(2, CollectiveKind::kAlltoallv, 30));
  v = AnalyzeFlightDumps({Dump(0, 2, e), Dump(1, 2, f)});
  EXPECT_TRUE(v.groups[0].findings.empty()) << v.ToText();
}

TEST(FlightRecord, MissingRanksAreSuspects) {
  std::vector<FlightDump> dumps;
  for (int r : {0, 1, 3}) {
    auto entries = Completed(7);
    entries.push_back(Coll(8, CollectiveKind::kAllreduce, 16, FlightState::kFailed));
    dumps.push_back(Dump(r, 4, entries));
  }
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_EQ(v.groups[0].findings.size(), 1u) << v.ToText();
  const FlightFinding& f = v.groups[0].findings[0];
  EXPECT_EQ(f.kind, FlightFindingKind::kMissing);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_NE(f.message.find("the missing ones are the suspects"), std::string::npos) << f.message;
  EXPECT_NE(v.ToText().find("(no dump)"), std::string::npos);
  EXPECT_EQ(v.ExitCode(), 1);
}

TEST(FlightRecord, FailureOnEveryRankAndHangInsideAnOperation) {
  std::vector<FlightDump> failed, stuck;
  for (int r = 0; r < 2; ++r) {
    auto entries = Completed(3);
    entries.push_back(Coll(4, CollectiveKind::kAllreduce, 16, FlightState::kFailed));
    failed.push_back(Dump(r, 2, entries));
    failed.back().failure = "allreduce #4: Timeout: connection reset";
    auto s = Completed(3);
    s.push_back(Coll(4, CollectiveKind::kAllgather, 16, FlightState::kStarted));
    stuck.push_back(Dump(r, 2, s));
  }
  FlightVerdict v = AnalyzeFlightDumps(failed);
  ASSERT_EQ(v.groups[0].findings.size(), 1u);
  EXPECT_EQ(v.groups[0].findings[0].kind, FlightFindingKind::kFailed);
  EXPECT_NE(v.groups[0].findings[0].message.find("ranks 0, 1: Timeout"), std::string::npos) << v.ToText();
  EXPECT_NE(v.groups[0].findings[0].message.find("connection reset"), std::string::npos) << v.ToText();
  v = AnalyzeFlightDumps(stuck);
  ASSERT_EQ(v.groups[0].findings.size(), 1u);
  EXPECT_EQ(v.groups[0].findings[0].kind, FlightFindingKind::kStuck);
  EXPECT_EQ(v.groups[0].findings[0].operation, "allgather #4 (f32 x 16)");
}

TEST(FlightRecord, GroupsAreAnalysedSeparatelyAndPendingP2pIsShown) {
  auto w0 = Completed(2), w1 = Completed(2);
  FlightRecord recv = Coll(1, CollectiveKind::kRecv, 4, FlightState::kStarted);
  recv.p2p = true;
  recv.peer = 0;
  w1.push_back(recv);
  std::vector<FlightDump> dumps{Dump(0, 2, w0), Dump(1, 2, w1), Dump(0, 1, Completed(1), "world/split1c0")};
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_EQ(v.groups.size(), 2u);
  EXPECT_EQ(v.groups[0].group, "world");
  EXPECT_NE(v.groups[0].ranks[1].pending_p2p.find("recv #1"), std::string::npos);
  EXPECT_NE(v.ToText().find("pending send/recv: recv #1 (f32 x 4, peer 0, tag 0) started"), std::string::npos) << v.ToText();
  // Duplicate dumps of one rank: the newer is used, with a warning.
  dumps.push_back(Dump(1, 2, Completed(2)));
  dumps.back().dumped_ns += 5;
  v = AnalyzeFlightDumps(dumps);
  EXPECT_TRUE(v.groups[0].ranks[1].pending_p2p.empty());
  bool warned = false;
  for (const auto& w : v.warnings) warned = warned || w.find("two dumps") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(FlightRecord, LoadingFilesAndDirectories) {
  commkit::testing::TempDir dir;
  dir.Write("world-rank0.json", FlightDumpToJson(Dump(0, 2, Completed(3))));
  dir.Write("world-rank1.json", FlightDumpToJson(Dump(1, 2, Completed(3))));
  dir.Write("other.json", "{\"not\": \"a dump\"}");
  dir.Write("notes.txt", "ignored");
  auto loaded = LoadFlightDumps({dir.path()});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->dumps.size(), 2u);
  ASSERT_EQ(loaded->warnings.size(), 1u);
  EXPECT_NE(loaded->warnings[0].find("other.json"), std::string::npos);
  EXPECT_EQ(loaded->dumps[0].source, (dir.path() / "world-rank0.json").string());
  EXPECT_TRUE(IsFlightRecordDocument(FlightDumpToJson(Dump(0, 1, {}))));
  EXPECT_TRUE(IsFlightRecordDocument(" \n{ \"commkit_flight_recorder\": 1}"));
  EXPECT_FALSE(IsFlightRecordDocument("{\"other\": {\"commkit_flight_recorder\": 1}}"));
  // A named file that is not a dump, a truncated dump, a missing file, an empty directory: errors naming the file.
  auto other = LoadFlightDumps({dir.path() / "other.json"});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().ToString().find("other.json"), std::string::npos);
  std::string text = FlightDumpToJson(Dump(0, 2, Completed(3)));
  auto cut = dir.Write("cut/world-rank0.json", text.substr(0, text.size() / 2));
  auto truncated = LoadFlightDumps({cut});
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("not valid JSON"), std::string::npos) << truncated.status().message();
  EXPECT_FALSE(LoadFlightDumps({dir.path() / "nope.json"}).ok());
  std::filesystem::create_directories(dir.path() / "empty");
  auto none = LoadFlightDumps({dir.path() / "empty"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no flight recorder dump"), std::string::npos);
  // ExplainFlightRecords (explain's entry point) takes the texts.
  auto ex = ExplainFlightRecords({{"a", FlightDumpToJson(Dump(0, 1, Completed(1)))}});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->ExitCode(), 0);
  EXPECT_FALSE(ExplainFlightRecords({{"b", "{"}}).ok());
}

// ---- end to end: ranks as threads on the host backend ----

std::vector<FlightDump> RunAndCollect(const std::filesystem::path& dir, const std::function<void(ProcessGroup&)>& body) {
  commkit::testing::ScopedEnv env("COMMKIT_FLIGHT_RECORDER_DIR", dir.string());
  commkit::testing::RunRanks("host", 3, body, {.timeout = 20s});
  auto loaded = LoadFlightDumps({dir});
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? loaded->dumps : std::vector<FlightDump>{};
}

TEST(FlightRecordEndToEnd, ARankThatSkipsACollectiveIsNamed) {
  commkit::testing::TempDir dir;
  std::atomic<int> finished{0};
  auto dumps = RunAndCollect(dir.path(), [&](ProcessGroup& pg) {
    std::vector<float> buf(16, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 2) {
      // Skips the second all-reduce and stays alive (as a hung rank would) until the others gave up;
      // an operator's SIGUSR1, or this request, dumps its ring.
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (finished.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
      auto path = pg.DumpFlightRecord("requested by the test");
      EXPECT_TRUE(path.ok()) << path.status().ToString();
      return;
    }
    auto w = pg.Allreduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 2s});
    ASSERT_TRUE(w.ok());
    Status s = (*w)->Wait();
    finished.fetch_add(1);
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  });
  ASSERT_EQ(dumps.size(), 3u);
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_EQ(v.groups.size(), 1u);
  ASSERT_FALSE(v.groups[0].findings.empty()) << v.ToText();
  const FlightFinding& f = v.groups[0].findings[0];
  EXPECT_EQ(f.kind, FlightFindingKind::kStopped) << v.ToText();
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.sequence, 2u);
  EXPECT_EQ(f.operation, "allreduce #2 (f32 x 16, sum)");
  EXPECT_EQ(v.groups[0].backend, "host");
  EXPECT_EQ(v.ExitCode(), 1);
}

TEST(FlightRecordEndToEnd, ARankThatCallsADifferentCollectiveIsNamed) {
  commkit::testing::TempDir dir;
  auto dumps = RunAndCollect(dir.path(), [&](ProcessGroup& pg) {
    std::vector<float> buf(16, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Barrier())->Wait());
    auto w = pg.rank() == 1 ? pg.Broadcast(buf.data(), 16, DataType::kFloat32, 0, {.timeout = 10s})
                            : pg.Allreduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 10s});
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)->Wait().code(), StatusCode::kMismatch);
  });
  ASSERT_EQ(dumps.size(), 3u);
  FlightVerdict v = AnalyzeFlightDumps(dumps);
  ASSERT_FALSE(v.groups[0].findings.empty()) << v.ToText();
  const FlightFinding& f = v.groups[0].findings[0];
  EXPECT_EQ(f.kind, FlightFindingKind::kDiverged) << v.ToText();
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  EXPECT_EQ(f.sequence, 2u);
  EXPECT_NE(f.message.find("rank 1 called broadcast #2"), std::string::npos) << f.message;
}

}  // namespace
}  // namespace commkit::diagnostics
