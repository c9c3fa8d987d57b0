// Label corpus: /work/shared/fixtures/logs/*.log with SOURCES.md as ground truth (via COMMKIT_FIXTURES_DIR).
// Rows whose label is settled / maintainer-stated / reporter-stated: the explainer's best signature must
// be the labelled cause. `unknown` rows: never high confidence.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

// Our mapping of each labelled root cause in SOURCES.md to an explainer signature.
const std::map<std::string, std::string> kExpected = {
    {"001", "socket.no_interface"},
    {"004", "shm.enospc"},
    {"009", "nvls.invalid_argument"},
    {"020", "ib.gdr_disabled"},
};

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ExplainCorpusTest, MatchesGroundTruth) {
  auto fixtures = testing::FixturesDir();
  if (!fixtures) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  std::filesystem::path logs = *fixtures / "logs";
  std::string sources = Slurp(logs / "SOURCES.md");
  if (sources.empty()) GTEST_SKIP() << "no SOURCES.md under " << logs;
  int rows = 0, labelled = 0, labelled_ok = 0, unknown = 0, unknown_ok = 0;
  for (const std::string& line : Split(sources, '\n')) {
    std::vector<std::string> cells = Split(line, '|');
    if (cells.size() < 8) continue;
    std::string id(Trim(cells[1])), file(Trim(cells[2])), conf = ToLower(Trim(cells[6]));
    if (!EndsWith(file, ".log")) continue;
    ++rows;
    Explanation ex = ExplainLog(Slurp(logs / file));
    bool is_labelled = StartsWith(conf, "settled") || StartsWith(conf, "maintainer-stated") ||
                       StartsWith(conf, "reporter-stated");
    if (is_labelled) {
      ++labelled;
      ASSERT_TRUE(kExpected.count(id)) << "labelled row " << id << " has no expected signature in this test";
      bool ok = ex.Best() != nullptr && ex.Best()->signature == kExpected.at(id);
      labelled_ok += ok;
      EXPECT_TRUE(ok) << file << ": got " << (ex.Best() ? ex.Best()->signature : "no claim");
    } else {
      ++unknown;
      bool ok = ex.Best() == nullptr || ex.Best()->confidence != Confidence::kHigh;
      unknown_ok += ok;
      EXPECT_TRUE(ok) << file << " (" << conf << "): claimed high confidence " << ex.Best()->signature;
    }
  }
  EXPECT_GE(rows, 20);
  std::printf("corpus: %d logs; labelled causes matched %d/%d; unknown rows without a high-confidence claim %d/%d\n",
              rows, labelled_ok, labelled, unknown_ok, unknown);
}

}  // namespace
}  // namespace commkit::diagnostics
