#include "commkit/common/log.h"

#include <gtest/gtest.h>

#include <vector>

namespace commkit {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    old_level_ = GetLogLevel();
    SetLogSink([this](LogLevel, std::string_view line) { lines_.emplace_back(line); });
  }
  void TearDown() override {
    SetLogSink(nullptr);
    SetLogRank(-1, 0);
    SetLogLevel(old_level_);
  }
  std::vector<std::string> lines_;
  LogLevel old_level_{};
};

TEST_F(LogTest, LevelsFilter) {
  SetLogLevel(LogLevel::kWarn);
  COMMKIT_LOG_ERROR("e");
  COMMKIT_LOG_WARN("w");
  COMMKIT_LOG_INFO("i");
  COMMKIT_LOG_DEBUG("d");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_NE(lines_[0].find("[commkit E "), std::string::npos);
  EXPECT_NE(lines_[1].find("[commkit W "), std::string::npos);
  SetLogLevel(LogLevel::kDebug);
  COMMKIT_LOG_DEBUG("d");
  EXPECT_EQ(lines_.size(), 3u);
}

TEST_F(LogTest, RankPrefixAndLocation) {
  SetLogLevel(LogLevel::kInfo);
  SetLogRank(3, 8);
  COMMKIT_LOG_INFO("allreduce #", 7, " done");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find(" rank 3/8 log_test.cc:"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[0].find("] allreduce #7 done"), std::string::npos) << lines_[0];
}

TEST_F(LogTest, ArgumentsNotEvaluatedWhenFiltered) {
  SetLogLevel(LogLevel::kError);
  int evaluated = 0;
  auto expensive = [&] { ++evaluated; return 1; };
  COMMKIT_LOG_DEBUG("value ", expensive());
  EXPECT_EQ(evaluated, 0);
}

}  // namespace
}  // namespace commkit
