// The Store contract, written once and run against every Store implementation.
//
// Use: provide a factory and instantiate the suite:
//   INSTANTIATE_TEST_SUITE_P(Tcp, StoreContract, ::testing::Values(StoreFactory{"tcp", &MakeTcpStorePair}));
// A factory returns two clients of one shared store (for a client/server store: two client
// connections of one server; for HashStore: the same object twice) plus an owner that keeps the
// server or temp files alive.
#pragma once

#include <limits>
#include <gtest/gtest.h>

#include <any>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commkit/comm/store.h"
#include "test_support.h"

namespace commkit::testing {

struct StoreInstance {
  std::shared_ptr<Store> a;
  std::shared_ptr<Store> b;
  std::shared_ptr<void> owner;
  std::string skip_reason;  // set when the store cannot run here (e.g. no etcd binary)
};

struct StoreFactory {
  std::string name;
  std::function<StoreInstance()> make;
};

inline void PrintTo(const StoreFactory& factory, std::ostream* os) { *os << factory.name; }

inline std::string PrintStoreFactory(const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; }

class StoreContract : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    instance_ = GetParam().make();
    if (!instance_.skip_reason.empty()) GTEST_SKIP() << instance_.skip_reason;
    ASSERT_TRUE(instance_.a && instance_.b) << "store factory failed";
  }
  Store& a() { return *instance_.a; }
  Store& b() { return *instance_.b; }
  StoreInstance instance_;
};

using std::chrono::milliseconds;
using namespace std::chrono_literals;

TEST_P(StoreContract, SetThenGetFromAnotherClient) {
  COMMKIT_ASSERT_OK(a().Set("k", "v1"));
  auto v = b().Get("k", 5s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "v1");
  COMMKIT_ASSERT_OK(b().Set("k", "v2"));
  EXPECT_EQ(*a().Get("k", 5s), "v2");
}

TEST_P(StoreContract, ValuesAreBinarySafe) {
  std::string value("\0\x01\xff zero\0bytes", 14);
  std::string key = "bin/\x7f key";
  COMMKIT_ASSERT_OK(a().Set(key, value));
  auto v = b().Get(key, 5s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, value);
  COMMKIT_ASSERT_OK(a().Set("empty", ""));
  EXPECT_EQ(*b().Get("empty", 5s), "");
}

TEST_P(StoreContract, GetWaitsForALaterSet) {
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    (void)b().Set("late", "here");
  });
  auto start = std::chrono::steady_clock::now();
  auto v = a().Get("late", 10s);
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "here");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_P(StoreContract, GetTimesOutNamingTheKey) {
  auto start = std::chrono::steady_clock::now();
  auto v = a().Get("never/set", 300ms);
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout) << v.status().ToString();
  EXPECT_NE(v.status().message().find("never/set"), std::string::npos) << v.status().message();
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s) << "a timeout must bound the wait";
}

TEST_P(StoreContract, WaitNamesOnlyTheMissingKeys) {
  COMMKIT_ASSERT_OK(a().Set("rank/0", "x"));
  COMMKIT_ASSERT_OK(a().Set("rank/2", "x"));
  Status s = b().Wait({"rank/0", "rank/1", "rank/2", "rank/3"}, 300ms);
  ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("rank/1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank/3"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("rank/0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2 of 4 keys"), std::string::npos) << s.message();
  COMMKIT_ASSERT_OK(a().Set("rank/1", "x"));
  COMMKIT_ASSERT_OK(a().Set("rank/3", "x"));
  COMMKIT_EXPECT_OK(b().Wait({"rank/0", "rank/1", "rank/2", "rank/3"}, 5s));
}

TEST_P(StoreContract, AddIsAtomicAcrossClients) {
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (Store* s : {&a(), &b(), &a(), &b()}) {
    threads.emplace_back([s, &failures] {
      for (int i = 0; i < kPerThread; ++i)
        if (!s->Add("counter", 1).ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*a().Add("counter", 0), 4 * kPerThread);
  EXPECT_EQ(*b().Add("counter", -10), 4 * kPerThread - 10);
  EXPECT_EQ(*a().Get("counter", 1s), std::to_string(4 * kPerThread - 10)) << "Add stores decimal text";
}

TEST_P(StoreContract, AddThatOverflowsIsInvalidArgumentAndKeepsTheValue) {
  ASSERT_TRUE(a().Add("big", std::numeric_limits<std::int64_t>::max() - 1).ok());
  auto r = b().Add("big", 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("overflows"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(*a().Add("big", 0), std::numeric_limits<std::int64_t>::max() - 1) << "a failed Add must not change the value";
}

TEST_P(StoreContract, AddOnNonIntegerIsInvalidArgument) {
  COMMKIT_ASSERT_OK(a().Set("text", "hello"));
  auto r = b().Add("text", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(*a().Get("text", 1s), "hello") << "a failed Add must not change the value";
}

TEST_P(StoreContract, CompareSet) {
  // Absent key, empty expected: set.
  EXPECT_EQ(*a().CompareSet("cas", "", "first"), "first");
  // Wrong expected: unchanged, returns current.
  EXPECT_EQ(*b().CompareSet("cas", "nope", "second"), "first");
  EXPECT_EQ(*a().Get("cas", 1s), "first");
  // Right expected: swapped.
  EXPECT_EQ(*b().CompareSet("cas", "first", "second"), "second");
  EXPECT_EQ(*a().Get("cas", 1s), "second");
  // Absent key with a non-empty expected: nothing is created.
  EXPECT_EQ(*a().CompareSet("cas-absent", "x", "y"), "");
  EXPECT_FALSE(*a().Check({"cas-absent"}));
}

TEST_P(StoreContract, CheckDeleteAndNumKeys) {
  auto before = a().NumKeys();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_FALSE(*a().Check({"c1"}));
  COMMKIT_ASSERT_OK(a().Set("c1", "1"));
  COMMKIT_ASSERT_OK(a().Set("c2", "2"));
  EXPECT_TRUE(*b().Check({"c1", "c2"}));
  EXPECT_FALSE(*b().Check({"c1", "c3"}));
  EXPECT_TRUE(*b().Check({}));
  EXPECT_EQ(*b().NumKeys(), *before + 2);
  EXPECT_TRUE(*b().Delete("c1"));
  EXPECT_FALSE(*a().Delete("c1"));
  EXPECT_FALSE(*a().Check({"c1"}));
  EXPECT_EQ(*a().NumKeys(), *before + 1);
}

TEST_P(StoreContract, MultiSetMultiGet) {
  COMMKIT_ASSERT_OK(a().MultiSet({"m/0", "m/1", "m/2"}, {"zero", "one", "two"}));
  auto v = b().MultiGet({"m/2", "m/0", "m/1"}, 5s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, (std::vector<std::string>{"two", "zero", "one"}));
  EXPECT_EQ(a().MultiSet({"x", "y"}, {"1"}).code(), StatusCode::kInvalidArgument);
  auto missing = b().MultiGet({"m/0", "m/9"}, 200ms);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kTimeout);
  EXPECT_NE(missing.status().message().find("m/9"), std::string::npos);
  auto empty = b().MultiGet({}, 200ms);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_P(StoreContract, DefaultTimeoutOverloadsUseSetTimeout) {
  a().set_timeout(200ms);
  EXPECT_EQ(a().timeout(), 200ms);
  auto start = std::chrono::steady_clock::now();
  auto v = a().Get("default/timeout");
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_P(StoreContract, LargeValue) {
  std::string big(1 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>(i % 251);
  COMMKIT_ASSERT_OK(a().Set("big", big));
  auto v = b().Get("big", 10s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, big);
}

}  // namespace commkit::testing
