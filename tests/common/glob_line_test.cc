#include <gtest/gtest.h>

#include <string>

#include "commkit/common/text.h"

namespace commkit {
namespace {

TEST(GlobMatch, StarsAndQuestionMarks) {
  EXPECT_TRUE(GlobMatch("*.conf", "cuda.conf"));
  EXPECT_FALSE(GlobMatch("*.conf", "cuda.conf~"));
  EXPECT_TRUE(GlobMatch("libnccl-net-?.so", "libnccl-net-x.so"));
  EXPECT_FALSE(GlobMatch("libnccl-net-?.so", "libnccl-net-.so"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYbc"));
  EXPECT_TRUE(GlobMatch("**", ""));
  EXPECT_FALSE(GlobMatch("", "x"));
  EXPECT_TRUE(GlobMatch("", ""));
  EXPECT_FALSE(GlobMatch("[ab]", "a")) << "no character classes: '[' is literal";
  EXPECT_TRUE(GlobMatch("[ab]", "[ab]"));
}

TEST(GlobMatch, HostilePatternStaysFast) {
  const std::string text(20000, 'a');
  std::string pattern;
  for (int i = 0; i < 200; ++i) pattern += "*a";
  pattern += "b";
  EXPECT_FALSE(GlobMatch(pattern, text));  // quadratic at worst, never exponential
}

TEST(LineOfOffset, CountsNewlinesBeforeTheOffset) {
  const std::string text = "a\nbc\n\nd";
  EXPECT_EQ(LineOfOffset(text, 0), 1);
  EXPECT_EQ(LineOfOffset(text, 1), 1);  // the '\n' itself ends line 1
  EXPECT_EQ(LineOfOffset(text, 2), 2);
  EXPECT_EQ(LineOfOffset(text, 5), 3);
  EXPECT_EQ(LineOfOffset(text, 6), 4);
  EXPECT_EQ(LineOfOffset(text, 1000), 4) << "past the end: the last line";
  EXPECT_EQ(LineOfOffset(text, -1), 0);
  EXPECT_EQ(LineOfOffset("", 0), 1);
}

}  // namespace
}  // namespace commkit
