// Every topology fixture survives ExportJson -> LoadJson unchanged (model and paths).
#include <gtest/gtest.h>

#include "commkit/topology/import.h"
#include "commkit/topology/json.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

TEST(JsonCorpusTest, EveryFixtureRoundTrips) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(*testing::FixturesDir() / "topology")) {
    const std::string name = entry.path().filename().string();
    if (name == "SOURCES.md") continue;
    SCOPED_TRACE(name);
    auto a = ImportTopologyFile(entry.path());
    if (name.find("graph") != std::string::npos) {
      EXPECT_FALSE(a.ok());  // NCCL graph file, recognised and refused
      continue;
    }
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ++files;
    const std::string text = ExportJson(*a);
    auto b = LoadJson(text, name);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(ExportJson(*b), text);
    const PathMatrix pa = ComputePaths(*a), pb = ComputePaths(*b);
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      for (std::size_t j = 0; j < pa.size(); ++j) {
        EXPECT_EQ(pa.at(i, j).Label(), pb.at(i, j).Label());
        EXPECT_EQ(pa.at(i, j).p2p, pb.at(i, j).p2p);
      }
    }
    auto c = ImportTopologyText(text, name);  // format detection finds JSON
    EXPECT_TRUE(c.ok()) << c.status().ToString();
  }
  EXPECT_EQ(files, 16);  // 17 data files in the corpus, one of them the graph file
}

}  // namespace
}  // namespace commkit::topology
