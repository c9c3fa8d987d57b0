// The selection table's calibration (commkit/comm/tuning.h): fitting measured times, the cache file
// and its path, and the plan printed from a table. The grammar and precedence: tune_test.cc.
#include <nlohmann/json.hpp>

#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "test_support.h"
#include "tune_test_support.h"

namespace commkit::testing {
namespace {

// ---- calibration cache ----

TEST(TuneCalibration, FitRecoversAlphaAndBeta) {
  std::vector<std::pair<double, double>> samples;
  for (double n = 8; n <= (64 << 20); n *= 4) samples.emplace_back(n, 5e-6 + n / 2e9);
  const tune::Fit f = tune::FitSamples(samples);
  EXPECT_NEAR(f.alpha_s, 5e-6, 1e-7);
  EXPECT_NEAR(f.beta_Bps, 2e9, 2e7);
  // One stalled size (50x) does not move the fit.
  auto stalled = samples;
  stalled[3].second *= 50;
  const tune::Fit r = tune::FitSamples(stalled);
  EXPECT_NEAR(r.alpha_s, 5e-6, 1e-7);
  EXPECT_NEAR(r.beta_Bps, 2e9, 2e7);
  tune::Fit key;
  key.backend = "host";
  const auto pieces = tune::FitPieces(key, samples);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].min_bytes, 0u);
  EXPECT_EQ(pieces[1].min_bytes, 65536u);
  EXPECT_EQ(pieces[2].max_bytes, tune::kNoLimit);
  for (const auto& [n, t] : samples) {
    tune::Calibration c;
    c.fits = pieces;
    const tune::Fit* p = c.Find("host", kAll, CollectiveAlgorithm::kRing, 2, static_cast<std::size_t>(n));
    ASSERT_NE(p, nullptr);
    EXPECT_NEAR(tune::PredictSeconds(*p, n) / t, 1.0, 0.05) << n;
  }
}

// A cache knee (9 GB/s while the working set fits, 4.5 GB/s beyond 4 MiB) is followed at every
// measured size, and a piece with one sample joins its neighbour instead of guessing a line.
TEST(TuneCalibration, FitPiecesFollowACacheKnee) {
  std::vector<std::pair<double, double>> samples;
  for (double n = 8; n <= (64 << 20); n *= 2) {
    const double beta = n <= (4 << 20) ? 9e9 : 4.5e9;
    samples.emplace_back(n, 1e-6 + n / beta);
  }
  tune::Fit key;
  key.backend = "host";
  tune::Calibration c;
  c.fits = tune::FitPieces(key, samples);
  EXPECT_GE(c.fits.size(), 4u);
  for (const auto& [n, t] : samples) {
    const tune::Fit* p = c.Find("host", kAll, CollectiveAlgorithm::kRing, 2, static_cast<std::size_t>(n));
    ASSERT_NE(p, nullptr);
    EXPECT_NEAR(tune::PredictSeconds(*p, n) / t, 1.0, 0.1) << n;
  }
  // -f 8 from 8 B: 128 KiB, 1 MiB, 8 MiB and 64 MiB fall one per piece above 64 KiB.
  std::vector<std::pair<double, double>> sparse;
  for (double n = 8; n <= (64 << 20); n *= 8) sparse.emplace_back(n, 1e-6 + n / 9e9);
  const auto pieces = tune::FitPieces(key, sparse);
  for (const tune::Fit& f : pieces) EXPECT_GE(f.samples, 2) << f.min_bytes;
  EXPECT_EQ(pieces.back().max_bytes, tune::kNoLimit);
  // A steep line through two samples far above a piece's start would predict almost nothing at the
  // start and win every comparison there: the fit never goes below the smallest sample scaled down.
  const tune::Fit steep = tune::FitSamples({{1 << 20, 100e-6}, {2 << 20, 1000e-6}}, 256 << 10);
  EXPECT_GE(tune::PredictSeconds(steep, 256 << 10), 100e-6 / 4 * 0.999);
  for (std::size_t i = 1; i < pieces.size(); ++i) EXPECT_EQ(pieces[i].min_bytes, pieces[i - 1].max_bytes);
}

TEST(TuneCalibration, CacheRoundTripAndEveryBadFile) {
  TempDir dir;
  const auto path = dir.path() / "sub" / "cal.json";
  auto absent = tune::LoadCalibration(path);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());

  tune::Calibration c = SyntheticCalibration("mpi", 2);
  ScopedEnv cache("COMMKIT_TUNE_CACHE", path.string());
  ASSERT_EQ(tune::CalibrationPath(), path);
  // The right host and version: what CalibrationPath's default name is keyed by.
  auto probe = tune::ParseCalibration(tune::SerializeCalibration(c), "x");
  ASSERT_TRUE(probe.ok());
  c.version = COMMKIT_VERSION_STRING;
  char host[256] = {};
  std::snprintf(host, sizeof(host), "%s", tune::CalibrationHostname().c_str());
  c.hostname = host;
  ASSERT_TRUE(tune::SaveCalibration(path, c).ok());
  auto loaded = tune::LoadCalibration(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->fits, c.fits);

  // The table reads the cache named by COMMKIT_TUNE_CACHE.
  tune::TableOptions o;
  o.spec = "";
  o.legacy_env = false;
  EXPECT_EQ(MustTable("mpi", {2, 2, 1}, o).Select(kAll, kHostMem, 8).source, Source::kCalibration);

  const std::string good = tune::SerializeCalibration(c);
  auto with = [&](std::string from, std::string to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  struct Bad {
    std::string text, expect;
  } bad[] = {
      {"", "not a JSON object"},
      {"{\"format\": 3", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {with("commkit-calibration", "something-else"), "not a commkit calibration file"},
      {with("\"format_version\": 1", "\"format_version\": 2"), "format_version is not 1"},
      {with(StrCat("\"", COMMKIT_VERSION_STRING, "\""), "\"0.0.0-other\""), "measured by commkit 0.0.0-other"},
      {with(StrCat("\"", host, "\""), "\"another-host\""), "measured on host 'another-host'"},
      {with("\"recursive_doubling\"", "\"teleport\""), "unknown algorithm"},
      {with("\"beta_Bps\": 1000000000.0", "\"beta_Bps\": -1"), "in range"},
      {std::string(2 << 20, ' '), "calibration cache"},
  };
  for (const Bad& b : bad) {
    dir.Write("sub/cal.json", b.text);
    auto r = tune::LoadCalibration(path);
    ASSERT_FALSE(r.ok()) << b.expect;
    EXPECT_NE(r.status().message().find(b.expect), std::string::npos) << b.expect << " -> " << r.status().message();
    // A bad cache never stops a group: the table notes it and plans without it.
    auto t = tune::Table::ForGroup("mpi", {2, 2, 1}, o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->Select(kAll, kHostMem, 8).source, Source::kDefault);
    ASSERT_FALSE(t->notes().empty());
    EXPECT_NE(t->notes().back().find("calibration cache ignored"), std::string::npos) << t->notes().back();
  }
  ScopedEnv off("COMMKIT_TUNE_CACHE", "off");
  EXPECT_TRUE(tune::CalibrationPath().empty());
}

TEST(TuneCalibration, DefaultPathIsKeyedByHostAndVersion) {
  ScopedEnv cache("COMMKIT_TUNE_CACHE", std::nullopt);
  ScopedEnv xdg("XDG_CACHE_HOME", "/nonexistent/xdg");
  const std::string p = tune::CalibrationPath().string();
  EXPECT_EQ(p.rfind("/nonexistent/xdg/commkit/calibration-", 0), 0u) << p;
  EXPECT_NE(p.find(COMMKIT_VERSION_STRING), std::string::npos) << p;
}

// ---- plan ----

TEST(TunePlan, RowsTextAndJson) {
  tune::TableOptions o = Isolated("mpi.allreduce:1M-:library");
  auto t = MustTable("mpi", {2, 2, 1}, o);
  const auto rows = tune::Plan(t, kAll, kHostMem, 32 << 10, 64 << 20);  // the flat rule's last sizes on
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(rows[0].min_bytes, 32u << 10);
  EXPECT_EQ(rows[0].max_bytes, 64u << 10);
  EXPECT_EQ(rows[0].source, Source::kDefault);
  EXPECT_GT(rows[0].predicted_min_s, 0);
  EXPECT_EQ(rows[1].algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(rows[1].params.segment_bytes, 256u << 10);
  EXPECT_EQ(rows[2].algorithm, CollectiveAlgorithm::kLibrary);
  EXPECT_EQ(rows[2].source, Source::kEnv);
  EXPECT_EQ(rows[2].max_bytes, 64u << 20);
  const std::string text = tune::PlanText(rows);
  EXPECT_NE(text.find("flat over shared memory up to 64 KiB"), std::string::npos) << text;
  EXPECT_NE(text.find("segment=256 KiB"), std::string::npos) << text;
  EXPECT_NE(text.find("tuning spec item 1 'mpi.allreduce:1M-:library'"), std::string::npos) << text;
  auto j = nlohmann::json::parse(tune::PlanJson(rows));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[2]["algorithm"], "library");
  EXPECT_EQ(j[2]["source"], "env");
  EXPECT_EQ(j[1]["segment_bytes"], 256 << 10);
  EXPECT_NE(tune::Describe(t, kAll, kHostMem).find("library"), std::string::npos);
}

}  // namespace
}  // namespace commkit::testing
