// The host reduction kernels against a scalar reference: every f16 and bf16 bit pattern (through the
// blocked, vectorized f32 path, F16C where the CPU has it), tails that are not a multiple of the
// vector width, aliasing outputs, and the integer/float kernels for every op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "commkit/comm/reduce_kernels.h"

namespace commkit {
namespace {

bool HalfIsNan(unsigned short h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool Bf16IsNan(unsigned short h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

TEST(ReduceKernels, Float16SumOfEveryBitPatternMatchesTheScalarReference) {
  std::vector<unsigned short> a(65536), b(65536), out(65536);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned short>(i);
  for (unsigned short y : {0x0000, 0x8000, 0x3C00, 0x0001, 0x83FF, 0x7BFF, 0x7C00, 0x1400}) {
    for (auto& v : b) v = y;
    GetReduceFunction(DataType::kFloat16, ReduceKind::kSum)(out.data(), a.data(), b.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      unsigned short want = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(y));
      if (HalfIsNan(want)) {
        ASSERT_TRUE(HalfIsNan(out[i])) << std::hex << a[i] << " + " << y;
      } else {
        ASSERT_EQ(out[i], want) << std::hex << a[i] << " + " << y;
      }
    }
  }
}

TEST(ReduceKernels, BFloat16MaxAndSumOfEveryBitPatternMatchTheScalarReference) {
  std::vector<unsigned short> a(65536), b(65536), out(65536);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned short>(i);
  for (unsigned short y : {0x0000, 0x3F80, 0xBF80, 0x0001, 0x7F7F, 0x7F80}) {
    for (auto& v : b) v = y;
    GetReduceFunction(DataType::kBFloat16, ReduceKind::kSum)(out.data(), a.data(), b.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      unsigned short want = FloatToBFloat16(BFloat16ToFloat(a[i]) + BFloat16ToFloat(y));
      if (Bf16IsNan(want)) {
        ASSERT_TRUE(Bf16IsNan(out[i])) << std::hex << a[i] << " + " << y;
      } else {
        ASSERT_EQ(out[i], want) << std::hex << a[i] << " + " << y;
      }
    }
    GetReduceFunction(DataType::kBFloat16, ReduceKind::kMax)(out.data(), a.data(), b.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (Bf16IsNan(a[i])) continue;
      unsigned short want = FloatToBFloat16(std::max(BFloat16ToFloat(a[i]), BFloat16ToFloat(y)));
      ASSERT_EQ(out[i], want) << std::hex << a[i] << " max " << y;
    }
  }
}

TEST(ReduceKernels, TailsAndAliasingOutputs) {
  for (std::size_t n : {1u, 7u, 8u, 9u, 255u, 256u, 257u, 1000u}) {
    std::vector<unsigned short> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = FloatToHalf(static_cast<float>(i) * 0.5f);
      y[i] = FloatToHalf(2.0f);
    }
    const std::vector<unsigned short> before = x;
    // c aliases a: x *= 2, exact in f16 for these values.
    GetReduceFunction(DataType::kFloat16, ReduceKind::kProd)(x.data(), x.data(), y.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(HalfToFloat(x[i]), 2.0f * HalfToFloat(before[i])) << n << " " << i;
    std::vector<float> f(n, 2.0f), g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i);
    GetReduceFunction(DataType::kFloat32, ReduceKind::kMin)(g.data(), f.data(), g.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(g[i], std::min(2.0f, static_cast<float>(i)));
  }
}

TEST(ReduceKernels, IntegerBitwiseAndArithmetic) {
  std::vector<std::int32_t> a{1, -2, 3, 0x0F0F}, b{4, 5, -6, 0x00FF}, c(4);
  GetReduceFunction(DataType::kInt32, ReduceKind::kBxor)(c.data(), a.data(), b.data(), 4);
  EXPECT_EQ(c[3], 0x0F0F ^ 0x00FF);
  GetReduceFunction(DataType::kInt32, ReduceKind::kProd)(c.data(), a.data(), b.data(), 4);
  EXPECT_EQ(c[2], -18);
  std::vector<std::int64_t> d{10, -7};
  DivideInPlace(DataType::kInt64, d.data(), 2, 4);
  EXPECT_EQ(d[0], 2);
  EXPECT_EQ(d[1], -1);  // truncating, as NCCL's AVG
}

TEST(ReduceKernels, StreamingCopyMatchesMemcpyAtEveryAlignmentAndLength) {
  // Destinations at every offset within a 16-byte line (the streamed body starts at the first aligned
  // byte), lengths around the 64-byte body step, and nothing written outside [dst, dst + n).
  std::vector<std::uint8_t> src(4096 + 64), dst(4096 + 96);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 131 + 7);
  for (std::size_t offset = 0; offset < 17; ++offset) {
    for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 1000, 4096}) {
      std::fill(dst.begin(), dst.end(), std::uint8_t{0xEE});
      const std::size_t from = (offset * 5) % 13;  // sources unaligned too
      StreamingCopy(dst.data() + offset, src.data() + from, n);
      for (std::size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= offset && i < offset + n;
        ASSERT_EQ(dst[i], inside ? src[from + i - offset] : std::uint8_t{0xEE})
            << "offset " << offset << " n " << n << " byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace commkit
