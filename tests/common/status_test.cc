#include "commkit/common/status.h"

#include <gtest/gtest.h>

#include <memory>

#include "commkit/common/strings.h"

namespace commkit {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(StrCat("odd value ", x));
  return x / 2;
}

Result<int> Quarter(int x) {
  COMMKIT_ASSIGN_OR_RETURN(int half, Half(x));
  COMMKIT_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int x) {
  COMMKIT_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(s.WithContext("ignored").ok());
}

TEST(Status, CodeMessageAndContextChain) {
  Status s = Status::Timeout("waited 30 s for keys [a, b]");
  EXPECT_FALSE(s.ok());
  Status chained = s.WithContext("store get").WithContext("rank 3/8");
  EXPECT_EQ(chained.code(), StatusCode::kTimeout);
  EXPECT_EQ(chained.message(), "rank 3/8: store get: waited 30 s for keys [a, b]");
  EXPECT_EQ(chained.ToString(), "Timeout: rank 3/8: store get: waited 30 s for keys [a, b]");
  EXPECT_EQ(s.message(), "waited 30 s for keys [a, b]") << "WithContext must not modify the original";
}

TEST(Status, FromErrnoNamesTheCall) {
  Status s = Status::FromErrno(ENOENT, "open /dev/shm/x");
  EXPECT_EQ(s.code(), StatusCode::kSystemError);
  EXPECT_NE(s.message().find("open /dev/shm/x: No such file or directory (errno 2)"), std::string::npos) << s.message();
}

TEST(Status, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    EXPECT_NE(ToString(static_cast<StatusCode>(c)), "Unknown") << c;
  }
}

TEST(Result, ValueAndErrorPropagate) {
  auto ok = Quarter(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 2);
  auto bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "odd value 3");
  EXPECT_EQ(bad.value_or(-1), -1);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> r = Status::NotFound("nope");
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on an error: NotFound: nope");
}

}  // namespace
}  // namespace commkit
