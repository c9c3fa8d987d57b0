#include "mpi_types.h"

#include <mutex>

#include "commkit/comm/reduce_kernels.h"

namespace commkit::comm::mpi {

MPI_Datatype MpiType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;  // moved as bits, reduced by our own MPI_Op
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

ReduceKind BaseKind(ReduceKind k) {
  return (k == ReduceKind::kAvg || k == ReduceKind::kPreMulSum) ? ReduceKind::kSum : k;
}

namespace {

// f16 / bf16 reductions: user-defined MPI_Ops computing in f32 with the shared host kernels.
template <int D, int K>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceFunction fn = GetReduceFunction(static_cast<DataType>(D), static_cast<ReduceKind>(K));
  fn(inout, in, inout, static_cast<std::size_t>(*len));
}

constexpr int kF16 = static_cast<int>(DataType::kFloat16);
constexpr int kBF16 = static_cast<int>(DataType::kBFloat16);
constexpr int kSum = static_cast<int>(ReduceKind::kSum);
constexpr int kProd = static_cast<int>(ReduceKind::kProd);
constexpr int kMin = static_cast<int>(ReduceKind::kMin);
constexpr int kMax = static_cast<int>(ReduceKind::kMax);

MPI_Op HalfOp(DataType t, ReduceKind k) {
  static MPI_Op ops[2][4];
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_User_function* fns[2][4] = {
        {&HalfReduce<kF16, kSum>, &HalfReduce<kF16, kProd>, &HalfReduce<kF16, kMin>, &HalfReduce<kF16, kMax>},
        {&HalfReduce<kBF16, kSum>, &HalfReduce<kBF16, kProd>, &HalfReduce<kBF16, kMin>, &HalfReduce<kBF16, kMax>}};
    CallGuard g;
    for (int d = 0; d < 2; ++d)
      for (int k = 0; k < 4; ++k) MPI_Op_create(fns[d][k], /*commute=*/1, &ops[d][k]);
  });
  int d = t == DataType::kFloat16 ? 0 : 1;
  switch (k) {
    case ReduceKind::kProd: return ops[d][1];
    case ReduceKind::kMin: return ops[d][2];
    case ReduceKind::kMax: return ops[d][3];
    default: return ops[d][0];
  }
}

}  // namespace

MPI_Op MpiOp(DataType t, ReduceKind kind) {
  ReduceKind k = BaseKind(kind);
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) return HalfOp(t, k);
  switch (k) {
    case ReduceKind::kProd: return MPI_PROD;
    case ReduceKind::kMin: return MPI_MIN;
    case ReduceKind::kMax: return MPI_MAX;
    case ReduceKind::kBand: return MPI_BAND;
    case ReduceKind::kBor: return MPI_BOR;
    case ReduceKind::kBxor: return MPI_BXOR;
    default: return MPI_SUM;
  }
}

}  // namespace commkit::comm::mpi
