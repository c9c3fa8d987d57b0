// The verdict of the NCCL backend's fingerprint check, from the MAX all-reduce of [w, ~w] (CPU only:
// the reduction is simulated here; the device path is in nccl_engine_gpu_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "commkit/comm/nccl/nccl_runtime.h"
#include "nccl_fingerprint.h"

namespace commkit::comm::nccl {
namespace {

// What ncclAllReduce(MAX, ncclUint64) of every rank's [w, ~w] leaves in each rank's result.
FingerprintVerdict Reduce(const std::vector<std::uint64_t>& fingerprints) {
  std::uint64_t max_word = 0, max_complement = 0;
  for (std::uint64_t fp : fingerprints) {
    const std::uint64_t w = FingerprintWord(fp);
    max_word = std::max(max_word, w);
    max_complement = std::max(max_complement, ~w);
  }
  return JudgeFingerprint(max_word, max_complement);
}

TEST(NcclFingerprint, WordsAreNeverZeroSoAnUnwrittenResultIsPending) {
  for (std::uint64_t fp : {0ull, 1ull, ~0ull, 0x8000000000000000ull, 0x7fffffffffffffffull, 0xfffffffffffffffeull}) {
    EXPECT_NE(FingerprintWord(fp), 0u) << fp;
    EXPECT_NE(~FingerprintWord(fp), 0u) << fp;
  }
  EXPECT_EQ(JudgeFingerprint(0, 0), FingerprintVerdict::kPending);
  EXPECT_EQ(JudgeFingerprint(FingerprintWord(7), 0), FingerprintVerdict::kPending);
  EXPECT_EQ(JudgeFingerprint(0, ~FingerprintWord(7)), FingerprintVerdict::kPending);
}

TEST(NcclFingerprint, AgreementExactlyWhenEveryRankHasTheSameWord) {
  EXPECT_EQ(Reduce({42}), FingerprintVerdict::kAgree);
  EXPECT_EQ(Reduce(std::vector<std::uint64_t>(1024, 0xdeadbeefcafef00dull)), FingerprintVerdict::kAgree);
  EXPECT_EQ(Reduce({0, ~0ull}), FingerprintVerdict::kDiffer);
  std::vector<std::uint64_t> one_off(4096, 0x0123456789abcdefull);
  one_off[4095] = 0x0123456789abcdeeull + 4;  // differs in a bit the word keeps
  EXPECT_EQ(Reduce(one_off), FingerprintVerdict::kDiffer);
  one_off[4095] = 0x0123456789abcdefull;
  one_off[0] = 0x1123456789abcdefull;
  EXPECT_EQ(Reduce(one_off), FingerprintVerdict::kDiffer);
}

// Without a driver the slots cannot be allocated: a clear error that says how to go on, no crash.
TEST(NcclFingerprint, SlotsWithoutADriverFailWithAHint) {
  if (ProbeNcclRuntime().ok()) GTEST_SKIP() << "a GPU is present: nccl_engine_gpu_test covers the device path";
  auto slots = std::make_shared<FingerprintSlots>(0);
  auto check = slots->Acquire(42);
  ASSERT_FALSE(check.ok());
  EXPECT_NE(check.status().message().find("COMMKIT_CHECK_MISMATCH=0"), std::string::npos) << check.status().ToString();
  EXPECT_EQ(slots->capacity(), 0u);
}

}  // namespace
}  // namespace commkit::comm::nccl
