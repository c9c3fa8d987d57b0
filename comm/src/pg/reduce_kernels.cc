#include "commkit/comm/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "commkit/common/check.h"

namespace commkit {

float HalfToFloat(unsigned short h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1F;
  std::uint32_t mant = h & 0x3FF;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FF;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

unsigned short FloatToHalf(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::uint32_t sign = (bits >> 16) & 0x8000;
  std::int32_t exp = static_cast<std::int32_t>((bits >> 23) & 0xFF) - 127 + 15;
  std::uint32_t mant = bits & 0x7FFFFF;
  if (((bits >> 23) & 0xFF) == 0xFF) return static_cast<unsigned short>(sign | 0x7C00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<unsigned short>(sign | 0x7C00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<unsigned short>(sign);
    mant |= 0x800000;
    std::uint32_t shift = static_cast<std::uint32_t>(14 - exp);
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<unsigned short>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
  return static_cast<unsigned short>(half);
}

float BFloat16ToFloat(unsigned short h) {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

unsigned short FloatToBFloat16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFF)) return static_cast<unsigned short>((bits >> 16) | 0x40);
  std::uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<unsigned short>((bits + rounding) >> 16);
}

namespace {

struct Sum {
  template <typename T> static T Apply(T a, T b) { return static_cast<T>(a + b); }
};
struct Prod {
  template <typename T> static T Apply(T a, T b) { return static_cast<T>(a * b); }
};
struct Min {
  template <typename T> static T Apply(T a, T b) { return std::min(a, b); }
};
struct Max {
  template <typename T> static T Apply(T a, T b) { return std::max(a, b); }
};
struct Band {
  template <typename T> static T Apply(T a, T b) { return static_cast<T>(a & b); }
};
struct Bor {
  template <typename T> static T Apply(T a, T b) { return static_cast<T>(a | b); }
};
struct Bxor {
  template <typename T> static T Apply(T a, T b) { return static_cast<T>(a ^ b); }
};

// `c` aliases `a` or `b` exactly or not at all (the header's contract), so iterations are independent
// and the loop vectorizes without a run-time overlap check. The file is compiled at -O3 (GCC's -O2
// cost model vectorizes no loop whose trip count is unknown), and each kernel once more for AVX2 and
// for AVX-512, chosen once at run time: a host all-reduce of cache-resident data runs at the speed of
// this loop (SSE2 alone made the shared-memory engine's reduce phase about 2x slower).
template <typename T, typename Op>
inline void PlainLoop(void* c, const void* a, const void* b, std::size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) out[i] = Op::Apply(x[i], y[i]);
}

template <typename T, typename Op>
void Plain(void* c, const void* a, const void* b, std::size_t n) {
  PlainLoop<T, Op>(c, a, b, n);
}

#if defined(__x86_64__)
template <typename T, typename Op>
__attribute__((target("avx2"))) void PlainAvx2(void* c, const void* a, const void* b, std::size_t n) {
  PlainLoop<T, Op>(c, a, b, n);
}
template <typename T, typename Op>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void PlainAvx512(void* c, const void* a, const void* b,
                                                                                std::size_t n) {
  PlainLoop<T, Op>(c, a, b, n);
}

enum class Isa { kBase, kAvx2, kAvx512 };
Isa BestIsa() {
  static const Isa isa = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
      return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
    return Isa::kBase;
  }();
  return isa;
}
#endif

// The widest version of Plain<T, Op> this CPU runs.
template <typename T, typename Op>
ReduceFunction Best() {
#if defined(__x86_64__)
  switch (BestIsa()) {
    case Isa::kAvx512: return &PlainAvx512<T, Op>;
    case Isa::kAvx2: return &PlainAvx2<T, Op>;
    case Isa::kBase: break;
  }
#endif
  return &Plain<T, Op>;
}

// 16-bit floats are reduced in f32 in blocks: widen a block of each input into f32 arrays, apply the
// op, narrow back. Each pass is a simple loop the compiler vectorizes (bf16 conversions are shifts and
// selects; f16 uses the F16C instructions when the CPU has them, checked once at run time).
constexpr std::size_t kBlock = 256;

inline void WidenBf16(float* out, const unsigned short* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, 4);
  }
}
inline void NarrowBf16(unsigned short* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    std::uint32_t nan = (bits >> 16) | 0x40u;  // keep NaNs NaN (rounding could carry into infinity)
    out[i] = static_cast<unsigned short>((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
  }
}

inline void WidenF16Portable(float* out, const unsigned short* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}
inline void NarrowF16Portable(unsigned short* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void WidenF16C(float* out, const unsigned short* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  WidenF16Portable(out + i, in + i, n - i);
}
__attribute__((target("avx,f16c"))) void NarrowF16C(unsigned short* out, const float* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  NarrowF16Portable(out + i, in + i, n - i);
}
bool HaveF16C() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}
#endif

inline void WidenF16(float* out, const unsigned short* in, std::size_t n) {
#if defined(__x86_64__)
  if (HaveF16C()) return WidenF16C(out, in, n);
#endif
  WidenF16Portable(out, in, n);
}
inline void NarrowF16(unsigned short* out, const float* in, std::size_t n) {
#if defined(__x86_64__)
  if (HaveF16C()) return NarrowF16C(out, in, n);
#endif
  NarrowF16Portable(out, in, n);
}

template <void (*Widen)(float*, const unsigned short*, std::size_t),
          void (*Narrow)(unsigned short*, const float*, std::size_t), typename Op>
void Half(void* c, const void* a, const void* b, std::size_t n) {
  auto* out = static_cast<unsigned short*>(c);
  const auto* x = static_cast<const unsigned short*>(a);
  const auto* y = static_cast<const unsigned short*>(b);
  float fx[kBlock], fy[kBlock];
  for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
    const std::size_t m = std::min(kBlock, n - i0);
    Widen(fx, x + i0, m);
    Widen(fy, y + i0, m);
    for (std::size_t i = 0; i < m; ++i) fx[i] = Op::Apply(fx[i], fy[i]);
    Narrow(out + i0, fx, m);
  }
}

template <typename Op>
ReduceFunction ForArithmetic(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return Best<float, Op>();
    case DataType::kFloat64: return Best<double, Op>();
    case DataType::kFloat16: return &Half<WidenF16, NarrowF16, Op>;
    case DataType::kBFloat16: return &Half<WidenBf16, NarrowBf16, Op>;
    case DataType::kInt8: return Best<std::int8_t, Op>();
    case DataType::kUInt8: return Best<std::uint8_t, Op>();
    case DataType::kInt32: return Best<std::int32_t, Op>();
    case DataType::kInt64: return Best<std::int64_t, Op>();
  }
  return nullptr;
}

template <typename Op>
ReduceFunction ForBitwise(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return Best<std::int8_t, Op>();
    case DataType::kUInt8: return Best<std::uint8_t, Op>();
    case DataType::kInt32: return Best<std::int32_t, Op>();
    case DataType::kInt64: return Best<std::int64_t, Op>();
    default: return nullptr;
  }
}

template <typename T>
void Scale(void* data, std::size_t n, double factor) {
  T* p = static_cast<T*>(data);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<double>(p[i]) * factor);
}

template <float (*ToF)(unsigned short), unsigned short (*FromF)(float)>
void ScaleHalf(void* data, std::size_t n, double factor) {
  auto* p = static_cast<unsigned short*>(data);
  for (std::size_t i = 0; i < n; ++i) p[i] = FromF(static_cast<float>(ToF(p[i]) * factor));
}

template <typename T>
void DivideInt(void* data, std::size_t n, int divisor) {
  T* p = static_cast<T*>(data);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

}  // namespace

ReduceFunction GetReduceFunction(DataType dtype, ReduceKind kind) {
  ReduceFunction fn = nullptr;
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPreMulSum: fn = ForArithmetic<Sum>(dtype); break;
    case ReduceKind::kProd: fn = ForArithmetic<Prod>(dtype); break;
    case ReduceKind::kMin: fn = ForArithmetic<Min>(dtype); break;
    case ReduceKind::kMax: fn = ForArithmetic<Max>(dtype); break;
    case ReduceKind::kBand: fn = ForBitwise<Band>(dtype); break;
    case ReduceKind::kBor: fn = ForBitwise<Bor>(dtype); break;
    case ReduceKind::kBxor: fn = ForBitwise<Bxor>(dtype); break;
  }
  COMMKIT_CHECK(fn != nullptr, "no reduction ", ToString(kind), " for ", ToString(dtype));
  return fn;
}

void ScaleInPlace(DataType dtype, void* data, std::size_t n, double factor) {
  switch (dtype) {
    case DataType::kFloat32: return Scale<float>(data, n, factor);
    case DataType::kFloat64: return Scale<double>(data, n, factor);
    case DataType::kFloat16: return ScaleHalf<HalfToFloat, FloatToHalf>(data, n, factor);
    case DataType::kBFloat16: return ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(data, n, factor);
    case DataType::kInt8: return Scale<std::int8_t>(data, n, factor);
    case DataType::kUInt8: return Scale<std::uint8_t>(data, n, factor);
    case DataType::kInt32: return Scale<std::int32_t>(data, n, factor);
    case DataType::kInt64: return Scale<std::int64_t>(data, n, factor);
  }
}

void DivideInPlace(DataType dtype, void* data, std::size_t n, int divisor) {
  switch (dtype) {
    case DataType::kInt8: return DivideInt<std::int8_t>(data, n, divisor);
    case DataType::kUInt8: return DivideInt<std::uint8_t>(data, n, divisor);
    case DataType::kInt32: return DivideInt<std::int32_t>(data, n, divisor);
    case DataType::kInt64: return DivideInt<std::int64_t>(data, n, divisor);
    default: return ScaleInPlace(dtype, data, n, 1.0 / divisor);
  }
}

void StreamingCopy(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  // Streaming stores need 16-byte aligned destinations: the unaligned head and the tail go by memcpy.
  std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
  head = std::min(head, n);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const std::size_t body = n & ~std::size_t{63};
  for (std::size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + body, s + body, n - body);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace commkit
