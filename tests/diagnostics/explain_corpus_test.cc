// Scores gpudoctor explain on real failure output from public threads.
//
// 1. tests/data/explain-corpus (manifest.tsv: id, split, file, url, cause, settled, fix). Labelled rows
//    (settled / maintainer-stated / reporter-stated) count as right when the best candidate is the
//    labelled cause family; `unknown` rows must never get a high-confidence claim. Accuracy is printed
//    for the tuning and the heldout split separately; heldout misses are counted, not listed, so the
//    rules are not tuned on them. The heldout split is held to regression floors at the measured values,
//    printed next to the targets (90% right, 0 high claims on unknown rows) so the gap shows.
// 2. ../shared/fixtures/logs with SOURCES.md (COMMKIT_FIXTURES_DIR): the same two properties.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

std::string Slurp(const std::filesystem::path& p) {
  auto r = ReadRegularFile(p, kMaxExplainInputBytes, "corpus file");
  return r.ok() ? r.value() : std::string();
}

bool Labelled(std::string_view settled) {
  return StartsWith(settled, "settled") || StartsWith(settled, "maintainer-stated") ||
         StartsWith(settled, "reporter-stated");
}

struct Score {
  int labelled = 0, right = 0, unknown = 0, high_on_unknown = 0;
  double Accuracy() const { return labelled == 0 ? 1.0 : static_cast<double>(right) / labelled; }
};

// Floors, as counts on the corpus as it stands (a share would move whenever rows are added; counts only
// go up). Tuning: the rules were written against this split. Heldout: regression floors at the values
// measured without ever opening its rows, printed next to the targets (90% right, 0 high claims
// on unknown rows) so the gap shows. Measured values and their history: tests/data/explain-corpus/README.md.
constexpr int kTuningMinRight = 117;         // of 134 labelled tuning rows
constexpr int kTuningMaxHighOnUnknown = 0;   // of 113 unknown tuning rows
constexpr int kHeldoutMinRight = 35;         // of 65 labelled heldout rows
constexpr int kHeldoutMaxHighOnUnknown = 3;  // of 67 unknown heldout rows (the third came with the seventh batch)
constexpr double kTargetAccuracy = 0.90;
constexpr int kTargetHighOnUnknown = 0;

TEST(ExplainCorpusTest, ExplainCorpusSplits) {
  std::filesystem::path dir = testing::TestDataDir() / "explain-corpus";
  std::string manifest = Slurp(dir / "manifest.tsv");
  if (manifest.empty()) GTEST_SKIP() << "no " << (dir / "manifest.tsv");
  std::map<std::string, Score> scores;
  std::vector<std::string> rows = Split(manifest, '\n', true);
  ASSERT_GT(rows.size(), 1u);
  std::vector<std::string> header = Split(rows[0], '\t');
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[std::string(Trim(header[i]))] = i;
  for (const char* c : {"id", "split", "file", "cause", "settled"}) ASSERT_TRUE(col.count(c)) << "manifest lacks " << c;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    std::vector<std::string> cells = Split(rows[r], '\t');
    if (cells.size() < header.size() - 1) continue;
    auto cell = [&](const char* c) { return col[c] < cells.size() ? std::string(Trim(cells[col[c]])) : std::string(); };
    std::string split = cell("split"), cause = cell("cause"), settled = cell("settled");
    std::string text = Slurp(dir / cell("file"));
    if (text.empty()) {
      ADD_FAILURE() << "cannot read " << cell("file");
      continue;
    }
    Explanation ex = ExplainLog(text);
    std::string claim = ex.Best() == nullptr ? "none" : ex.Best()->signature;
    bool high = ex.Best() != nullptr && ex.Best()->confidence == Confidence::kHigh;
    Score& s = scores[split];
    if (cause != "unknown" && Labelled(settled)) {
      ++s.labelled;
      if (claim == cause) {
        ++s.right;
      } else if (split == "tuning") {
        std::printf("  tuning miss %s: labelled %s, got %s\n", cell("id").c_str(), cause.c_str(), claim.c_str());
      }
    } else {
      ++s.unknown;
      if (high) {
        ++s.high_on_unknown;
        // Heldout rows are bounded by count below (naming them would invite tuning on them).
        if (split != "heldout")
          ADD_FAILURE() << split << " row " << cell("id") << " is unsettled but got a high-confidence claim";
      }
    }
  }
  for (auto& [split, s] : scores)
    std::printf("explain corpus %s: right cause on %d/%d labelled logs (%.0f%%); high-confidence claims on unknown "
                "rows: %d/%d\n",
                split.c_str(), s.right, s.labelled, 100 * s.Accuracy(), s.high_on_unknown, s.unknown);
  EXPECT_GE(scores["tuning"].right, kTuningMinRight);
  EXPECT_LE(scores["tuning"].high_on_unknown, kTuningMaxHighOnUnknown);
  if (scores.count("heldout") && scores["heldout"].labelled > 0) {
    const Score& h = scores["heldout"];
    std::printf("explain corpus heldout vs target: right %.0f%% (target >= %.0f%%, floor %d of %d); high claims on "
                "unknown rows %d (target %d, ceiling %d)\n",
                100 * h.Accuracy(), 100 * kTargetAccuracy, kHeldoutMinRight, h.labelled, h.high_on_unknown,
                kTargetHighOnUnknown, kHeldoutMaxHighOnUnknown);
    EXPECT_GE(h.right, kHeldoutMinRight);
    EXPECT_LE(h.high_on_unknown, kHeldoutMaxHighOnUnknown);
  }
}

// Our mapping of the labelled rows of the shared fixtures (SOURCES.md) to cause families.
const std::map<std::string, std::string> kFixtureCauses = {
    {"001", "socket.ifname_missing"},
    {"004", "shm.space"},
    {"009", "nvls.fabricmanager"},
    {"020", "ib.gdr"},
};

TEST(ExplainCorpusTest, SharedFixtures) {
  auto fixtures = testing::FixturesDir();
  if (!fixtures) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  std::filesystem::path logs = *fixtures / "logs";
  std::string sources = Slurp(logs / "SOURCES.md");
  if (sources.empty()) GTEST_SKIP() << "no SOURCES.md under " << logs;
  int rows = 0, labelled = 0, right = 0, unknown = 0, unknown_ok = 0;
  for (const std::string& line : Split(sources, '\n')) {
    std::vector<std::string> cells = Split(line, '|');
    if (cells.size() < 8) continue;
    std::string id(Trim(cells[1])), file(Trim(cells[2])), conf = ToLower(Trim(cells[6]));
    if (!EndsWith(file, ".log")) continue;
    ++rows;
    Explanation ex = ExplainLog(Slurp(logs / file));
    if (Labelled(conf)) {
      ++labelled;
      ASSERT_TRUE(kFixtureCauses.count(id)) << "labelled row " << id << " has no expected cause in this test";
      bool ok = ex.Best() != nullptr && ex.Best()->signature == kFixtureCauses.at(id);
      right += ok;
      EXPECT_TRUE(ok) << file << ": got " << (ex.Best() ? ex.Best()->signature : "no claim");
    } else {
      ++unknown;
      bool ok = ex.Best() == nullptr || ex.Best()->confidence != Confidence::kHigh;
      unknown_ok += ok;
      EXPECT_TRUE(ok) << file << " (" << conf << "): claimed high confidence " << ex.Best()->signature;
    }
  }
  EXPECT_GE(rows, 20);
  std::printf("shared fixtures: %d logs; labelled causes matched %d/%d; unknown rows without a high-confidence claim "
              "%d/%d\n",
              rows, right, labelled, unknown_ok, unknown);
}

}  // namespace
}  // namespace commkit::diagnostics
