// Host reduction kernels shared by the host backends: out[i] = a[i] (op) b[i] for every dtype, plus
// the scaling steps of AVG and PREMUL_SUM. f16 and bf16 are reduced in f32 and rounded to nearest even.
#pragma once

#include <cstddef>

#include "commkit/comm/types.h"

namespace commkit {

// c = a op b, elementwise over n elements (c may be a or b, but must not overlap either partially). `kind` is one of SUM, PROD, MIN, MAX,
// BAND, BOR, BXOR (AVG and PREMUL_SUM reduce as SUM around ScaleInPlace). Bitwise kinds on floating
// types are a programmer error (ProcessGroup rejects them first).
using ReduceFunction = void (*)(void* c, const void* a, const void* b, std::size_t n);
ReduceFunction GetReduceFunction(DataType dtype, ReduceKind kind);

// data[i] *= factor (integers: rounded toward zero; used for PREMUL_SUM's scalar).
void ScaleInPlace(DataType dtype, void* data, std::size_t n, double factor);
// data[i] /= divisor (integers: truncating division, as NCCL's AVG).
void DivideInPlace(DataType dtype, void* data, std::size_t n, int divisor);

// f16 / bf16 conversions (round to nearest even).
float HalfToFloat(unsigned short h);
unsigned short FloatToHalf(float f);
float BFloat16ToFloat(unsigned short h);
unsigned short FloatToBFloat16(float f);

}  // namespace commkit
