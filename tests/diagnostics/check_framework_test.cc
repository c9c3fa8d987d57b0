#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/diagnostics/check.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

CheckRegistry Fake() {
  CheckRegistry r;
  r.Add({{"a.one", "A one", "alpha"}, [](const CheckContext&) { return CheckOutcome{CheckStatus::kPass, "ok", {}, ""}; }});
  r.Add({{"a.two", "A two", "alpha"},
         [](const CheckContext&) { return CheckOutcome{CheckStatus::kWarn, "meh", {"read /x: 1"}, "export X=1"}; }});
  r.Add({{"b.one", "B one", "beta"}, [](const CheckContext&) -> CheckOutcome { throw std::runtime_error("boom"); }});
  return r;
}

TEST(GlobTest, Matches) {
  EXPECT_TRUE(GlobMatch("shm.*", "shm.size"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("s?m.size", "shm.size"));
  EXPECT_FALSE(GlobMatch("shm", "shm.size"));
  EXPECT_TRUE(GlobMatch("*.size", "shm.size"));
  EXPECT_FALSE(GlobMatch("*.sizes", "shm.size"));
}

TEST(CheckFrameworkTest, SelectionAndExitCodes) {
  CheckRegistry r = Fake();
  CheckContext ctx{SystemView::Replay(testing::TestDataDir() / "gpudoctor" / "host-xid79")};
  Report all = RunChecks(r, ctx, {});
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_EQ(all.ExitCode(), 2);  // the throwing check is a failure
  EXPECT_NE(all.records[2].outcome.summary.find("boom"), std::string::npos);
  Report alpha = RunChecks(r, ctx, {{"alpha"}, {}});
  EXPECT_EQ(alpha.records.size(), 2u);
  EXPECT_EQ(alpha.ExitCode(), 1);
  EXPECT_EQ(RunChecks(r, ctx, {{"a"}, {}}).records.size(), 2u);  // prefix of ids
  EXPECT_EQ(SelectChecks(r, {{"zzz"}, {}}).size(), 0u);
  Report one = RunChecks(r, ctx, {{"*.one"}, {"beta"}});
  ASSERT_EQ(one.records.size(), 1u);
  EXPECT_EQ(one.records[0].info.id, "a.one");
  EXPECT_EQ(one.ExitCode(), 0);
}

TEST(CheckFrameworkTest, TextAndJson) {
  CheckRegistry r = Fake();
  CheckContext ctx{SystemView::Replay(testing::TestDataDir() / "gpudoctor" / "host-xid79")};
  Report rep = RunChecks(r, ctx, {{"alpha"}, {}});
  std::string text = rep.ToText(false);
  EXPECT_EQ(text.rfind("gpudoctor: 2 checks: 1 pass, 1 warn, 0 fail, 0 skip", 0), 0u) << text;
  EXPECT_EQ(text.find("\033["), std::string::npos);
  EXPECT_NE(rep.ToText(true).find("\033[33mWARN"), std::string::npos);
  auto doc = nlohmann::json::parse(rep.ToJson());
  EXPECT_EQ(doc["schema"], "commkit.gpudoctor.report/1");
  EXPECT_EQ(doc["exit_code"], 1);
  EXPECT_EQ(doc["checks"][1]["id"], "a.two");
  EXPECT_EQ(doc["checks"][1]["result"], "warn");
  EXPECT_EQ(doc["checks"][1]["fix"], "export X=1");
  EXPECT_EQ(doc["checks"][1]["evidence"][0], "read /x: 1");
}

TEST(CheckFrameworkTest, BuiltInIdsUnique) {
  CheckRegistry r = CheckRegistry::BuiltIn();
  EXPECT_GE(r.checks().size(), 12u);
  EXPECT_DEATH(r.Add({{"shm.size", "dup", "node"}, nullptr}), "");
}

}  // namespace
}  // namespace commkit::diagnostics
