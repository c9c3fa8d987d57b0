// Output formats: nccl-tests table, JSON lines, CSV and the --compare table.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/bench/report.h"
#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

ResultRow Row(std::string backend, std::size_t bytes, double time_us, long long wrong = 0) {
  ResultRow r;
  r.backend = std::move(backend);
  r.collective = BenchCollective::kAllreduce;
  r.bytes = bytes;
  r.count = bytes / 4;
  r.dtype = DataType::kFloat32;
  r.op = "sum";
  r.nranks = 2;
  r.warmup = 1;
  r.iters = 5;
  r.out_of_place = {true, time_us, 1.5, 1.5, wrong};
  r.in_place = {true, time_us * 2, 0.75, 0.75, 0};
  return r;
}

TEST(BenchReport, TableHasNcclTestsColumnsAndFooter) {
  const std::string header = TableHeader();
  for (const char* col : {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                          "out-of-place", "in-place", "(GB/s)"}) {
    EXPECT_NE(header.find(col), std::string::npos) << col;
  }
  const std::string row = TableRow(Row("gloo", 1024, 12.345));
  auto fields = Split(std::string(Trim(row)), ' ', /*skip_empty=*/true);
  ASSERT_EQ(fields.size(), 13u) << row;
  EXPECT_EQ(fields[0], "1024");
  EXPECT_EQ(fields[1], "256");
  EXPECT_EQ(fields[2], "f32");
  EXPECT_EQ(fields[3], "sum");
  EXPECT_EQ(fields[5], "12.35");
  EXPECT_EQ(fields[6], "1.50");
  EXPECT_EQ(fields[8], "0");
  EXPECT_EQ(fields[9], "24.69");

  const std::string ok = TableFooter({Row("gloo", 8, 1), Row("gloo", 16, 1)});
  EXPECT_NE(ok.find("# Out of bounds values : 0 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("# Avg bus bandwidth    : 1.125"), std::string::npos) << ok;
  const std::string bad = TableFooter({Row("gloo", 8, 1, 3)});
  EXPECT_NE(bad.find("3 FAILED"), std::string::npos) << bad;
}

TEST(BenchReport, MissingPlacementPrintsNA) {
  ResultRow r = Row("gloo", 64, 1);
  r.out_of_place = {};
  const std::string row = TableRow(r);
  EXPECT_EQ(Split(std::string(Trim(row)), ' ', true)[5], "N/A");
  r.in_place.wrong = -1;  // unchecked
  EXPECT_NE(TableRow(r).find("N/A"), std::string::npos);
}

TEST(BenchReport, JsonLinesOneObjectPerPlacement) {
  const std::string text = JsonLines(Row("mpi", 4096, 3.0));
  auto lines = Split(text, '\n', true);
  ASSERT_EQ(lines.size(), 2u);
  auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["backend"], "mpi");
  EXPECT_EQ(a["collective"], "allreduce");
  EXPECT_EQ(a["size"], 4096);
  EXPECT_EQ(a["count"], 1024);
  EXPECT_EQ(a["placement"], "out_of_place");
  EXPECT_DOUBLE_EQ(a["time_us"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(a["busbw_gbps"].get<double>(), 1.5);
  EXPECT_EQ(a["wrong"], 0);
  EXPECT_EQ(a["nranks"], 2);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["placement"], "in_place");
}

TEST(BenchReport, CsvHeaderMatchesRows) {
  const auto header = Split(std::string(Trim(CsvHeader())), ',');
  const auto rows = Split(CsvRows(Row("gloo", 8, 1)), '\n', true);
  ASSERT_EQ(rows.size(), 2u);
  for (const std::string& r : rows) EXPECT_EQ(Split(r, ',').size(), header.size()) << r;
  EXPECT_EQ(Split(rows[0], ',')[0], "gloo");
  EXPECT_EQ(Split(rows[0], ',')[8], "out_of_place");
  EXPECT_EQ(Split(rows[1], ',')[8], "in_place");
}

TEST(BenchReport, CompareTableRatiosToFirstBackend) {
  const std::string t = CompareTable({"gloo", "mpi"}, {Row("gloo", 8, 10), Row("mpi", 8, 5), Row("gloo", 16, 4)});
  EXPECT_NE(t.find("ratio"), std::string::npos);
  auto lines = Split(t, '\n', true);
  ASSERT_EQ(lines.size(), 4u) << t;  // title, header, two sizes
  auto f8 = Split(std::string(Trim(lines[2])), ' ', true);
  ASSERT_EQ(f8.size(), 7u) << lines[2];
  EXPECT_EQ(f8[0], "8");
  EXPECT_EQ(f8[3], "1.000");
  EXPECT_EQ(f8[6], "0.500");
  auto f16 = Split(std::string(Trim(lines[3])), ' ', true);
  EXPECT_EQ(f16.back(), "N/A");  // mpi did not run 16 B
}

TEST(BenchReport, TotalWrongIgnoresUncheckedCells) {
  ResultRow r = Row("gloo", 8, 1, -1);
  EXPECT_EQ(TotalWrong({r}), 0);
  EXPECT_EQ(TotalWrong({Row("gloo", 8, 1, 2), Row("gloo", 8, 1, 5)}), 7);
}

}  // namespace
}  // namespace commkit::bench
