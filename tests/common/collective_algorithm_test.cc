#include "commkit/common/collective_algorithm.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace commkit {
namespace {

// The spellings are an interface: COMMKIT_TUNE, the calibration cache, --plan output and the docs
// use them, so a rename here is a breaking change.
TEST(CollectiveAlgorithm, NamesAreTheDocumentedSpellings) {
  const std::string expected[] = {"flat",         "sliced", "ring",    "recursive_doubling", "halving_doubling",
                                  "hierarchical", "bcube",  "library", "binomial_tree",      "dissemination",
                                  "pairwise",     "direct", "single_copy"};
  ASSERT_EQ(std::size(expected), kNumCollectiveAlgorithms);
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < kNumCollectiveAlgorithms; ++i) {
    EXPECT_EQ(static_cast<std::size_t>(kCollectiveAlgorithms[i]), i);
    EXPECT_EQ(ToString(kCollectiveAlgorithms[i]), expected[i]);
    seen.insert(ToString(kCollectiveAlgorithms[i]));
  }
  EXPECT_EQ(seen.size(), kNumCollectiveAlgorithms) << "two algorithms share a name";
  EXPECT_EQ(ToString(static_cast<CollectiveAlgorithm>(200)), "?");
}

TEST(CollectiveAlgorithm, ParseRoundTripsIgnoringCaseAndSpaces) {
  for (CollectiveAlgorithm a : kCollectiveAlgorithms) {
    auto parsed = ParseCollectiveAlgorithm(ToString(a));
    ASSERT_TRUE(parsed.ok()) << ToString(a) << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, a);
  }
  auto upper = ParseCollectiveAlgorithm("  Halving_DOUBLING\t");
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  EXPECT_EQ(*upper, CollectiveAlgorithm::kHalvingDoubling);
}

TEST(CollectiveAlgorithm, UnknownNameIsInvalidArgumentListingEveryName) {
  for (std::string_view bad : {"", "rign", "ring2", "recursive-doubling", "tree"}) {
    auto r = ParseCollectiveAlgorithm(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("unknown algorithm '" + std::string(bad) + "'"), std::string::npos) << m;
    for (CollectiveAlgorithm a : kCollectiveAlgorithms)
      EXPECT_NE(m.find(ToString(a)), std::string::npos) << ToString(a) << " missing from: " << m;
  }
}

TEST(CollectiveAlgorithm, HostileNameIsShownShortAndEscaped) {
  auto r = ParseCollectiveAlgorithm(std::string("ri\x1b[2Jng") + std::string(1000, 'x'));
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << "a control byte reached the message";
  EXPECT_NE(m.find("\\x1b"), std::string::npos) << m;
  EXPECT_NE(m.find("..."), std::string::npos) << m;
  EXPECT_LT(m.size(), 400u) << m;
}

}  // namespace
}  // namespace commkit
