// CPU-only checks of the collective builders: argument validation of the v-variants, call counts of
// the grouped send/recv plans, and the PREMUL_SUM scalar conversions. Nothing here calls NCCL.
#include <gtest/gtest.h>

#include <limits>

#include "nccl_collectives.h"

namespace commkit::comm::nccl {
namespace {

constexpr int kFloat32 = 7;  // ncclFloat32

TEST(NcclCollectivesTest, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(0.5f), 0x3800);
  EXPECT_EQ(FloatToHalfBits(0.1f), 0x2e66);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);   // max half
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);   // rounds up to inf
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(1e-9f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(1.0f + 1.0f / 2048), 0x3c00);      // tie -> even
  EXPECT_EQ(FloatToHalfBits(1.0f + 3.0f / 2048), 0x3c02);      // tie -> even (up)
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()) & 0x7c00, 0x7c00);
  EXPECT_NE(FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()) & 0x03ff, 0);
}

TEST(NcclCollectivesTest, Bfloat16ConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToBfloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBfloat16Bits(3.0f), 0x4040);
  EXPECT_EQ(FloatToBfloat16Bits(-1.0f), 0xbf80);
  EXPECT_EQ(FloatToBfloat16Bits(1.0f + 1.0f / 256), 0x3f80);   // tie -> even
  EXPECT_EQ(FloatToBfloat16Bits(1.0f + 3.0f / 256), 0x3f82);   // tie -> even (up)
  EXPECT_EQ(FloatToBfloat16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  std::uint16_t nan = FloatToBfloat16Bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
}

TEST(NcclCollectivesTest, TypeSizes) {
  EXPECT_EQ(NcclTypeSize(0), 1u);    // int8
  EXPECT_EQ(NcclTypeSize(6), 2u);    // float16
  EXPECT_EQ(NcclTypeSize(9), 2u);    // bfloat16
  EXPECT_EQ(NcclTypeSize(kFloat32), 4u);
  EXPECT_EQ(NcclTypeSize(8), 8u);    // float64
  EXPECT_EQ(NcclTypeSize(99), 0u);
}

TEST(NcclCollectivesTest, AllGatherVValidatesAndPlansOneSendRecvPairPerRank) {
  float send[2];
  float recv[6];
  auto bad = AllGatherVCalls(send, 2, recv, {2, 1}, {0, 2, 3}, kFloat32, 0, 3);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("recv_counts"), std::string::npos);
  auto mismatch = AllGatherVCalls(send, 2, recv, {3, 1, 2}, {0, 3, 4}, kFloat32, 0, 3);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("recv_counts[0]"), std::string::npos);
  auto ok = AllGatherVCalls(send, 2, recv, {2, 1, 3}, {0, 2, 3}, kFloat32, 0, 3);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 6u);
}

TEST(NcclCollectivesTest, AllToAllVSkipsEmptyTransfers) {
  float send[4];
  float recv[4];
  auto plan = AllToAllVCalls(send, {1, 0, 3}, {0, 1, 1}, recv, {2, 2, 0}, {0, 2, 4}, kFloat32, 3);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->size(), 4u);  // sends to 0 and 2, receives from 0 and 1
  auto bad = AllToAllVCalls(send, {1, 0}, {0, 1, 1}, recv, {2, 2, 0}, {0, 2, 4}, kFloat32, 3);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("send_counts"), std::string::npos);
}

}  // namespace
}  // namespace commkit::comm::nccl
