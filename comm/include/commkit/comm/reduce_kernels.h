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

// dst = src over n bytes (not overlapping), written with non-temporal stores on x86-64: the lines go
// to memory without first being read into the cache (a regular store reads each line it writes), and
// they do not evict what is cached. For outputs too big to stay cached until they are read. Ends
// with a store fence, so a flag set afterwards publishes the data to other threads like a memcpy.
void StreamingCopy(void* dst, const void* src, std::size_t n);

// f16 / bf16 conversions (round to nearest even).
float HalfToFloat(unsigned short h);
unsigned short FloatToHalf(float f);
float BFloat16ToFloat(unsigned short h);
unsigned short FloatToBFloat16(float f);

}  // namespace commkit
