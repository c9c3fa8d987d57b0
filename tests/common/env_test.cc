#include "commkit/common/env.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace commkit {
namespace {

using testing::ScopedEnv;
using namespace std::chrono_literals;

TEST(Env, UnsetGivesNulloptAndDefaults) {
  ScopedEnv env("COMMKIT_TEST_UNSET", std::nullopt);
  auto v = EnvInt("COMMKIT_TEST_UNSET");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  EXPECT_EQ(*EnvIntOr("COMMKIT_TEST_UNSET", 5), 5);
  EXPECT_EQ(*EnvBoolOr("COMMKIT_TEST_UNSET", true), true);
  EXPECT_EQ(*EnvDurationOr("COMMKIT_TEST_UNSET", 7s), 7s);
}

TEST(Env, IntegersAreValidatedWithTheVariableName) {
  ScopedEnv env("COMMKIT_TEST_INT", "12abc");
  auto v = EnvInt("COMMKIT_TEST_INT");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(), "COMMKIT_TEST_INT='12abc' is not an integer");

  ScopedEnv env2("COMMKIT_TEST_INT2", "70000");
  auto r = EnvInt("COMMKIT_TEST_INT2", 1, 65535);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("out of range [1, 65535]"), std::string::npos);
  // The default does not hide an invalid value.
  EXPECT_FALSE(EnvIntOr("COMMKIT_TEST_INT2", 29500, 1, 65535).ok());
}

TEST(Env, Booleans) {
  for (const char* yes : {"1", "true", "YES", "on"}) {
    ScopedEnv env("COMMKIT_TEST_BOOL", yes);
    EXPECT_EQ(EnvBool("COMMKIT_TEST_BOOL")->value(), true) << yes;
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    ScopedEnv env("COMMKIT_TEST_BOOL", no);
    EXPECT_EQ(EnvBool("COMMKIT_TEST_BOOL")->value(), false) << no;
  }
  ScopedEnv env("COMMKIT_TEST_BOOL", "maybe");
  EXPECT_FALSE(EnvBool("COMMKIT_TEST_BOOL").ok());
}

TEST(Env, Durations) {
  EXPECT_EQ(*ParseDuration("30"), 30s);
  EXPECT_EQ(*ParseDuration("30s"), 30s);
  EXPECT_EQ(*ParseDuration("500ms"), 500ms);
  EXPECT_EQ(*ParseDuration("2m"), 120s);
  EXPECT_EQ(*ParseDuration("1.5s"), 1500ms);
  EXPECT_FALSE(ParseDuration("fast").ok());
  EXPECT_FALSE(ParseDuration("10 parsecs").ok());
  EXPECT_FALSE(ParseDuration("-3s").ok());
  ScopedEnv env("COMMKIT_TEST_DUR", "5x");
  auto d = EnvDuration("COMMKIT_TEST_DUR");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("COMMKIT_TEST_DUR"), std::string::npos);
}

TEST(Env, Choices) {
  ScopedEnv env("COMMKIT_TEST_CHOICE", "GLOO");
  EXPECT_EQ(EnvChoice("COMMKIT_TEST_CHOICE", {"gloo", "mpi", "nccl"})->value(), "gloo");
  ScopedEnv env2("COMMKIT_TEST_CHOICE2", "tcp");
  auto bad = EnvChoice("COMMKIT_TEST_CHOICE2", {"gloo", "mpi"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "COMMKIT_TEST_CHOICE2='tcp' is not one of: gloo, mpi");
}

TEST(Env, ReadOnceAndCached) {
  ScopedEnv env("COMMKIT_TEST_ONCE", "1");
  EXPECT_EQ(EnvIntOr("COMMKIT_TEST_ONCE", 0).value(), 1);
  ::setenv("COMMKIT_TEST_ONCE", "2", 1);  // without a cache reset the first value stays
  EXPECT_EQ(EnvIntOr("COMMKIT_TEST_ONCE", 0).value(), 1);
}

}  // namespace
}  // namespace commkit
