// The flight recorder's ring (wraparound, point-to-point ring, concurrent writers), its JSON round
// trip and parse errors, the dump triggers (failure, signal, request) and the Prometheus metrics.
#include "commkit/comm/flight_recorder.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "commkit/comm/metrics.h"
#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit {
namespace {

using namespace std::chrono_literals;

FlightRecorderOptions Quiet(std::size_t entries, std::string dir = "") {
  FlightRecorderOptions o;
  o.entries = entries;
  o.dump_dir = std::move(dir);
  o.signal = 0;
  return o;
}

CollectiveArgs Op(CollectiveKind kind, std::uint64_t seq, std::size_t count = 8) {
  CollectiveArgs a;
  a.kind = kind;
  a.sequence = seq;
  a.count = count;
  a.dtype = DataType::kFloat32;
  a.op = ReduceOp::Max();
  a.root = static_cast<int>(seq % 3);
  a.peer = kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv ? 1 : -1;
  a.tag = 7;
  a.fingerprint = 0x1234 + seq;
  return a;
}

void RunOne(FlightRecorder& r, const CollectiveArgs& a, const Status& s = Status::Ok()) {
  r.Scheduled(a);
  const std::int64_t t = r.Started(a);
  r.Finished(a, t, s);
}

TEST(FlightRecorder, KeepsTheLastEntriesInOrderAcrossWraparound) {
  auto r = FlightRecorder::Create({0, 2, "world", "host"}, Quiet(8));
  for (std::uint64_t seq = 1; seq <= 20; ++seq) RunOne(*r, Op(CollectiveKind::kAllreduce, seq, seq * 4));
  r->Scheduled(Op(CollectiveKind::kBroadcast, 21));  // queued, not started
  FlightDump d = r->Snapshot("test");
  ASSERT_EQ(d.entries.size(), 8u);
  EXPECT_EQ(d.collectives, 21u);
  for (std::size_t i = 0; i < d.entries.size(); ++i) {
    const FlightRecord& e = d.entries[i];
    EXPECT_EQ(e.sequence, 14 + i);
    EXPECT_FALSE(e.p2p);
    if (e.sequence == 21) {
      EXPECT_EQ(e.kind, CollectiveKind::kBroadcast);
      EXPECT_EQ(e.state, FlightState::kScheduled);
      EXPECT_EQ(e.started_ns, 0);
      EXPECT_EQ(e.root, 0);
      continue;
    }
    EXPECT_EQ(e.kind, CollectiveKind::kAllreduce);
    EXPECT_EQ(e.count, e.sequence * 4);
    EXPECT_EQ(e.reduce, ReduceKind::kMax);
    EXPECT_EQ(e.fingerprint, 0x1234 + e.sequence);
    EXPECT_EQ(e.state, FlightState::kCompleted);
    EXPECT_LE(e.enqueued_ns, e.started_ns);
    EXPECT_LE(e.started_ns, e.ended_ns);
    if (i > 0) {
      EXPECT_LE(d.entries[i - 1].enqueued_ns, e.enqueued_ns);
    }
  }
}

TEST(FlightRecorder, PointToPointHasItsOwnRingAndFailuresKeepTheirCode) {
  auto r = FlightRecorder::Create({1, 2, "world", "gloo"}, Quiet(4));
  for (std::uint64_t seq = 1; seq <= 3; ++seq) RunOne(*r, Op(CollectiveKind::kAllreduce, seq));
  for (std::uint64_t seq = 1; seq <= 6; ++seq) RunOne(*r, Op(seq % 2 ? CollectiveKind::kSend : CollectiveKind::kRecv, seq));
  RunOne(*r, Op(CollectiveKind::kBarrier, 4), Status::Timeout("rank 0 never arrived"));
  FlightDump d = r->Snapshot("test");
  int colls = 0, p2p = 0;
  for (const auto& e : d.entries) (e.p2p ? p2p : colls)++;
  EXPECT_EQ(colls, 4);
  EXPECT_EQ(p2p, 4);
  EXPECT_EQ(d.p2p_operations, 6u);
  const FlightRecord& last = d.entries.back();
  EXPECT_EQ(last.kind, CollectiveKind::kBarrier);
  EXPECT_EQ(last.state, FlightState::kFailed);
  EXPECT_EQ(last.error, StatusCode::kTimeout);
  EXPECT_NE(d.failure.find("barrier #4"), std::string::npos) << d.failure;
  EXPECT_NE(d.failure.find("never arrived"), std::string::npos) << d.failure;
}

TEST(FlightRecorder, ZeroEntriesRecordsNothingButStillCounts) {
  auto r = FlightRecorder::Create({0, 1, "world", "host"}, Quiet(0));
  RunOne(*r, Op(CollectiveKind::kAllreduce, 1, 2));
  EXPECT_TRUE(r->Snapshot("x").entries.empty());
  EXPECT_EQ(r->metrics().Count(CollectiveKind::kAllreduce), 1u);
  EXPECT_EQ(r->metrics().Bytes(CollectiveKind::kAllreduce), 8u);
}

// Writers on several threads (as sends, receives and collectives are) while a reader snapshots: every
// entry read is one writer's whole record, never a mix. Each thread runs its own kind of operation,
// as ProcessGroup does (the metrics counters have one writer per kind).
TEST(FlightRecorder, ConcurrentWritersNeverProduceTornEntries) {
  auto r = FlightRecorder::Create({0, 4, "world", "host"}, Quiet(64));
  constexpr int kThreads = 4;
  constexpr std::uint64_t kPerThread = 5000;
  std::atomic<bool> done{false}, reading{false};
  std::atomic<int> torn{0}, seen{0};
  // On a loaded machine the writers can finish before the reader is first scheduled: they wait for it
  // (bounded), and it keeps reading until it has seen entries.
  std::thread reader([&] {
    reading = true;
    for (int i = 0; i < 2000 && (!done.load() || seen.load() == 0); ++i) {
      for (const FlightRecord& e : r->Snapshot("test").entries) {
        seen.fetch_add(1);
        if (e.count != e.sequence * 3 || e.fingerprint != 0x1234 + e.sequence || e.root != static_cast<int>(e.sequence % 3))
          torn.fetch_add(1);
      }
    }
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!reading.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        const std::uint64_t seq = i * kThreads + static_cast<std::uint64_t>(t) + 1;
        RunOne(*r, Op(static_cast<CollectiveKind>(t), seq, seq * 3));
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "of " << seen.load() << " entries read";
  EXPECT_GT(seen.load(), 0);
  FlightDump d = r->Snapshot("final");
  EXPECT_EQ(d.entries.size(), 64u);
  for (const auto& e : d.entries) EXPECT_EQ(e.count, e.sequence * 3);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(r->metrics().Count(static_cast<CollectiveKind>(t)), kPerThread);
  EXPECT_EQ(r->metrics().InFlight(), 0u);
}

TEST(FlightRecorder, JsonRoundTrip) {
  auto r = FlightRecorder::Create({2, 4, "world/split1c0", "gloo"}, Quiet(16));
  RunOne(*r, Op(CollectiveKind::kAllreduce, 1));
  RunOne(*r, Op(CollectiveKind::kSend, 1));
  auto gather = Op(CollectiveKind::kGather, 2, 5);
  r->Scheduled(gather);
  (void)r->Started(gather);
  FlightDump before = r->Snapshot("round \"trip\"\n");
  const std::string text = FlightDumpToJson(before);
  auto after = ParseFlightDump(text);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->version, kFlightRecorderVersion);
  EXPECT_EQ(after->rank, 2);
  EXPECT_EQ(after->world_size, 4);
  EXPECT_EQ(after->group, "world/split1c0");
  EXPECT_EQ(after->backend, "gloo");
  EXPECT_EQ(after->reason, before.reason);
  EXPECT_EQ(after->pid, before.pid);
  EXPECT_EQ(after->host, before.host);
  EXPECT_EQ(after->collectives, 2u);
  ASSERT_EQ(after->entries.size(), before.entries.size());
  for (std::size_t i = 0; i < before.entries.size(); ++i) {
    const FlightRecord& a = before.entries[i];
    const FlightRecord& b = after->entries[i];
    EXPECT_EQ(a.sequence, b.sequence);
    EXPECT_EQ(a.p2p, b.p2p);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.count, b.count);
    EXPECT_EQ(a.reduce, b.reduce);
    EXPECT_EQ(a.root, b.root);
    EXPECT_EQ(a.peer, b.peer);
    EXPECT_EQ(a.tag, b.tag);
    EXPECT_EQ(a.fingerprint, b.fingerprint);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.enqueued_ns, b.enqueued_ns);
    EXPECT_EQ(a.started_ns, b.started_ns);
    EXPECT_EQ(a.ended_ns, b.ended_ns);
  }
  EXPECT_EQ(r->DumpFileName(), "world_split1c0-rank2.json");
}

TEST(FlightRecorder, MalformedDumpsAreClearErrors) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto d = ParseFlightDump(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status().message();
  };
  expect_error("{\"commkit_flight_recorder\": {", "not valid JSON");
  expect_error("[1,2]", "no top-level \"commkit_flight_recorder\"");
  expect_error("{\"other\": 1}", "not a commkit flight recorder dump");
  const std::string head = R"({"commkit_flight_recorder": {"version": 1, "rank": 0, "world_size": 2, "group": "world", )";
  expect_error(head + R"("entries": 5}})", "\"entries\" must be an array");
  expect_error(R"({"commkit_flight_recorder": {"version": 99, "rank": 0, "world_size": 2, "group": "w", "entries": []}})",
               "version 99 is not supported");
  expect_error(R"({"commkit_flight_recorder": {"version": 1, "rank": 5, "world_size": 2, "group": "w", "entries": []}})",
               "outside the world of 2");
  expect_error(head + R"("entries": [{"seq": 1, "op": "allredux", "dtype": "f32", "count": 1, "state": "completed"}]}})",
               "entries[0]: \"op\" is \"allredux\", not one of allreduce");
  expect_error(head + R"("entries": [{"seq": "1", "op": "allreduce", "dtype": "f32", "count": 1, "state": "completed"}]}})",
               "\"seq\" must be an integer");
  expect_error(head + R"("entries": [{"seq": 1, "op": "allreduce", "dtype": "f32", "count": -1, "state": "completed"}]}})",
               "\"count\" is out of range");
  expect_error(head + R"("entries": [{"seq": 1, "op": "allreduce", "dtype": "f32", "count": 1}]}})", "\"state\" is missing");
}

TEST(FlightRecorder, TheFirstFailureWritesOneDump) {
  commkit::testing::TempDir dir;
  auto r = FlightRecorder::Create({1, 3, "world", "host"}, Quiet(16, dir.path().string()));
  RunOne(*r, Op(CollectiveKind::kAllreduce, 1));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "world-rank1.json"));
  RunOne(*r, Op(CollectiveKind::kAllreduce, 2), Status::Timeout("late"));
  const auto file = dir.path() / "world-rank1.json";
  ASSERT_TRUE(std::filesystem::exists(file));
  auto first = ReadRegularFile(file, 1 << 20, "dump");
  ASSERT_TRUE(first.ok());
  RunOne(*r, Op(CollectiveKind::kAllreduce, 3), Status::Timeout("later"));
  auto second = ReadRegularFile(file, 1 << 20, "dump");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second) << "a second failure must not rewrite the dump";
  auto d = ParseFlightDump(*first);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->reason, "failure of allreduce #2");
  EXPECT_EQ(d->entries.back().state, FlightState::kFailed);
  // No temporary files left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

TEST(FlightRecorder, DumpOnRequestAndWithoutADirectory) {
  commkit::testing::TempDir dir;
  auto r = FlightRecorder::Create({0, 1, "world", "host"}, Quiet(16));
  RunOne(*r, Op(CollectiveKind::kAllreduce, 1), Status::Timeout("x"));  // no directory: no dump, no error
  auto none = r->Dump("asked");
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("COMMKIT_FLIGHT_RECORDER_DIR"), std::string::npos);
  auto there = r->Dump("asked", dir.path() / "sub");
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_EQ(there->filename(), "world-rank0.json");
  // A file where the directory should be is refused with a clear error.
  std::ofstream(dir.path() / "plain") << "x";
  auto bad = r->Dump("asked", dir.path() / "plain");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("plain"), std::string::npos) << bad.status().ToString();
}

TEST(FlightRecorder, OptionsFromTheEnvironment) {
  using commkit::testing::ScopedEnv;
  {
    auto o = FlightRecorderOptionsFromEnvironment();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->entries, 2048u);
    EXPECT_NE(o->dump_dir.find("commkit-flight-"), std::string::npos) << o->dump_dir;
    EXPECT_TRUE(o->dump_dir_is_default);
    EXPECT_EQ(o->signal, SIGUSR1);
    EXPECT_FALSE(o->signal_forced);
  }
  {
    ScopedEnv e1("COMMKIT_FLIGHT_RECORDER_ENTRIES", "0");
    ScopedEnv e2("COMMKIT_FLIGHT_RECORDER_DIR", "");
    ScopedEnv e3("COMMKIT_FLIGHT_RECORDER_SIGNAL", "SIGUSR2");
    auto o = FlightRecorderOptionsFromEnvironment();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->entries, 0u);
    EXPECT_EQ(o->dump_dir, "");
    EXPECT_EQ(o->signal, SIGUSR2);
    EXPECT_TRUE(o->signal_forced);
  }
  {
    ScopedEnv e("COMMKIT_FLIGHT_RECORDER_SIGNAL", "off");
    EXPECT_EQ(FlightRecorderOptionsFromEnvironment()->signal, 0);
  }
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"COMMKIT_FLIGHT_RECORDER_ENTRIES", "many"},
           {"COMMKIT_FLIGHT_RECORDER_ENTRIES", "1000000000"},
           {"COMMKIT_FLIGHT_RECORDER_SIGNAL", "KILL"},
           {"COMMKIT_FLIGHT_RECORDER_DUMP_ON_FAILURE", "maybe"},
           {"COMMKIT_METRICS_INTERVAL", "1ms"}}) {
    ScopedEnv e(name, value);
    Status s = FlightRecorder::CheckEnvironment();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
  // ProcessGroup::Create refuses an invalid value instead of running without a recorder.
  ScopedEnv e("COMMKIT_FLIGHT_RECORDER_ENTRIES", "-1");
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, {.backend = "host"});
  ASSERT_FALSE(pg.ok());
  EXPECT_NE(pg.status().message().find("COMMKIT_FLIGHT_RECORDER_ENTRIES"), std::string::npos);
}

// SIGUSR2 has an application handler: not taken. SIGUSR1 has none: raising it dumps every live group.
TEST(FlightRecorder, SignalDumpsEveryGroupButLeavesApplicationHandlersAlone) {
  struct sigaction app {};
  app.sa_handler = [](int) {};
  sigemptyset(&app.sa_mask);
  struct sigaction saved {};
  ASSERT_EQ(::sigaction(SIGUSR2, &app, &saved), 0);
  commkit::testing::TempDir dir;
  FlightRecorderOptions o = Quiet(16, dir.path().string());
  o.signal = SIGUSR2;
  {
    auto r = FlightRecorder::Create({0, 1, "usr2", "host"}, o);
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGUSR2, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, app.sa_handler) << "the application's handler was replaced";
  }
  ::sigaction(SIGUSR2, &saved, nullptr);

  o.signal = SIGUSR1;
  auto a = FlightRecorder::Create({0, 2, "sig", "host"}, o);
  auto b = FlightRecorder::Create({1, 2, "sig", "host"}, o);
  struct sigaction installed {};
  ASSERT_EQ(::sigaction(SIGUSR1, nullptr, &installed), 0);
  ASSERT_NE(installed.sa_handler, SIG_DFL) << "no SIGUSR1 handler: raising it would end the test";
  RunOne(*a, Op(CollectiveKind::kAllreduce, 1));
  RunOne(*b, Op(CollectiveKind::kAllreduce, 1));
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline &&
         !(std::filesystem::exists(dir.path() / "sig-rank0.json") && std::filesystem::exists(dir.path() / "sig-rank1.json")))
    std::this_thread::sleep_for(20ms);
  for (const char* name : {"sig-rank0.json", "sig-rank1.json"}) {
    auto text = ReadRegularFile(dir.path() / name, 1 << 20, "dump");
    ASSERT_TRUE(text.ok()) << name << ": " << text.status().ToString();
    auto d = ParseFlightDump(*text);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->reason, "SIGUSR1 received");
    EXPECT_EQ(d->entries.size(), 1u);
  }
}

// ---- metrics ----

// One sample of a Prometheus text exposition, parsed back (labels unescaped).
struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// Parses the text format strictly enough to catch what a scraper would reject: HELP/TYPE before a
// family's samples, label syntax and escapes, one value per line.
std::vector<PromSample> ParseProm(const std::string& text, std::map<std::string, std::string>* types) {
  std::vector<PromSample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      (*types)[name] = type;
      continue;
    }
    EXPECT_FALSE(line.empty() || line[0] == '#') << line;
    PromSample s;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    EXPECT_TRUE(PrometheusText::IsValidMetricName(s.name)) << line;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string key, value;
        while (i < line.size() && line[i] != '=') key += line[i++];
        EXPECT_TRUE(PrometheusText::IsValidLabelName(key)) << line;
        EXPECT_EQ(line.substr(i, 2), "=\"") << line;
        i += 2;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            const char c = line[++i];
            EXPECT_TRUE(c == '\\' || c == '"' || c == 'n') << "bad escape in " << line;
            value += c == 'n' ? '\n' : c;
          } else {
            value += line[i];
          }
          ++i;
        }
        ++i;  // closing quote
        if (i < line.size() && line[i] == ',') ++i;
        s.labels[key] = value;
      }
      ++i;  // }
    }
    EXPECT_EQ(line[i], ' ') << line;
    s.value = line.substr(i + 1);
    EXPECT_EQ(s.value.find(' '), std::string::npos) << line;
    out.push_back(s);
  }
  return out;
}

TEST(Metrics, HistogramBuckets) {
  EXPECT_EQ(LatencyHistogram::BucketOf(-5), 0);
  EXPECT_EQ(LatencyHistogram::BucketOf(1000), 0);
  EXPECT_EQ(LatencyHistogram::BucketOf(1001), 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(2000), 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(2001), 2);
  EXPECT_EQ(LatencyHistogram::BucketOf(1'000'000), 10);  // 1 ms <= 1024 us
  EXPECT_EQ(LatencyHistogram::BucketOf(std::int64_t{1} << 62), LatencyHistogram::kBuckets);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(0), 1e-6);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(10), 1024e-6);
}

TEST(Metrics, FormatAndEscaping) {
  EXPECT_EQ(PrometheusText::FormatValue(3), "3");
  EXPECT_EQ(PrometheusText::FormatValue(0.25), "0.25");
  EXPECT_EQ(PrometheusText::FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(PrometheusText::FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(PrometheusText::FormatValue(0.0 / 0.0), "NaN");
  EXPECT_EQ(PrometheusText::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(PrometheusText::EscapeHelp("x\\y\nz \""), "x\\\\y\\nz \"");
  EXPECT_FALSE(PrometheusText::IsValidMetricName("1abc"));
  EXPECT_FALSE(PrometheusText::IsValidLabelName("a:b"));
  EXPECT_TRUE(PrometheusText::IsValidMetricName("commkit:x_1"));
}

TEST(Metrics, RenderedGroupsParseBackWithTheirValues) {
  auto r = FlightRecorder::Create({3, 4, "we\"ird\\grp\nname", "host"}, Quiet(4));
  auto a = Op(CollectiveKind::kAllreduce, 1, 8);
  r->Scheduled(a);
  std::int64_t t = r->Started(a);
  std::this_thread::sleep_for(3ms);
  r->Finished(a, t, Status::Ok());
  RunOne(*r, Op(CollectiveKind::kAllreduce, 2, 8), Status::Timeout("x"));
  RunOne(*r, Op(CollectiveKind::kBarrier, 3, 0));
  auto b = Op(CollectiveKind::kBroadcast, 4, 1);
  r->Scheduled(b);
  (void)r->Started(b);  // in flight
  const std::string text = RenderMetrics({r->shared_metrics()}, UnixNanos() + 2'000'000'000);
  std::map<std::string, std::string> types;
  auto samples = ParseProm(text, &types);
  EXPECT_EQ(types["commkit_collectives_total"], "counter");
  EXPECT_EQ(types["commkit_collective_latency_seconds"], "histogram");
  EXPECT_EQ(types["commkit_seconds_since_last_progress"], "gauge");
  auto find = [&](const std::string& name, const std::string& op, const std::string& le = "") -> const PromSample* {
    for (const auto& s : samples) {
      if (s.name != name) continue;
      EXPECT_EQ(s.labels.at("group"), "we\"ird\\grp\nname");
      EXPECT_EQ(s.labels.at("rank"), "3");
      if (!op.empty() && s.labels.count("op") && s.labels.at("op") != op) continue;
      if (!le.empty() && s.labels.at("le") != le) continue;
      return &s;
    }
    return nullptr;
  };
  ASSERT_NE(find("commkit_collectives_total", "allreduce"), nullptr) << text;
  EXPECT_EQ(find("commkit_collectives_total", "allreduce")->value, "2");
  EXPECT_EQ(find("commkit_collectives_total", "barrier")->value, "1");
  EXPECT_EQ(find("commkit_collectives_total", "broadcast"), nullptr) << "nothing completed yet: no series";
  EXPECT_EQ(find("commkit_collective_failures_total", "allreduce")->value, "1");
  EXPECT_EQ(find("commkit_collective_bytes_total", "allreduce")->value, "64");
  EXPECT_EQ(find("commkit_group_size", "")->value, "4");
  EXPECT_EQ(find("commkit_operations_in_flight", "")->value, "1");
  EXPECT_GE(std::stod(find("commkit_seconds_since_last_progress", "")->value), 1.5);
  // Buckets are cumulative, end at +Inf == _count, and the 3 ms operation is in le=0.004096 but not 0.002048.
  double prev = 0;
  int buckets = 0;
  for (const auto& s : samples) {
    if (s.name != "commkit_collective_latency_seconds_bucket" || s.labels.at("op") != "allreduce") continue;
    ++buckets;
    EXPECT_GE(std::stod(s.value), prev) << s.labels.at("le");
    prev = std::stod(s.value);
  }
  EXPECT_EQ(buckets, LatencyHistogram::kBuckets + 1);
  EXPECT_EQ(find("commkit_collective_latency_seconds_bucket", "allreduce", "+Inf")->value, "2");
  EXPECT_EQ(find("commkit_collective_latency_seconds_count", "allreduce")->value, "2");
  EXPECT_EQ(find("commkit_collective_latency_seconds_bucket", "allreduce", "0.002048")->value,
            find("commkit_collective_latency_seconds_bucket", "allreduce", "0.001024")->value);
  EXPECT_GE(std::stod(find("commkit_collective_latency_seconds_sum", "allreduce")->value), 0.003);
}

TEST(Metrics, TextfileIsWrittenPeriodicallyAndAtTheEnd) {
  using commkit::testing::ScopedEnv;
  commkit::testing::TempDir dir;
  ScopedEnv f("COMMKIT_METRICS_FILE", (dir.path() / "commkit-{pid}.prom").string());
  ScopedEnv i("COMMKIT_METRICS_INTERVAL", "100ms");
  const auto file = dir.path() / StrCat("commkit-", ::getpid(), ".prom");
  {
    auto r = FlightRecorder::Create({0, 1, "textfile", "host"}, Quiet(0));
    RunOne(*r, Op(CollectiveKind::kAllreduce, 1, 8));
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    bool counted = false;
    while (!counted && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      auto text = ReadRegularFile(file, 1 << 20, "metrics");
      counted = text.ok() && text->find("commkit_collectives_total{group=\"textfile\",rank=\"0\",backend=\"host\",op=\"allreduce\"} 1") != std::string::npos;
    }
    EXPECT_TRUE(counted) << "the periodic writer did not write the count";
    RunOne(*r, Op(CollectiveKind::kAllreduce, 2, 8));
  }
  // At the group's end the file holds its final values.
  auto text = ReadRegularFile(file, 1 << 20, "metrics");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("op=\"allreduce\"} 2"), std::string::npos) << *text;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1) << "temporary files left behind";
}

}  // namespace
}  // namespace commkit
