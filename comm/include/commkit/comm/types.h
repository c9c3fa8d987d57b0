// Element types, reduction operations, memory kinds and collective kinds of the process-group API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace commkit {

enum class DataType : std::uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
inline constexpr int kNumDataTypes = 8;

std::size_t SizeOf(DataType type);
std::string_view ToString(DataType type);
bool IsFloatingPoint(DataType type);

enum class ReduceKind : std::uint8_t { kSum, kProd, kMin, kMax, kAvg, kPreMulSum, kBand, kBor, kBxor };
inline constexpr int kNumReduceKinds = 9;

std::string_view ToString(ReduceKind kind);

// A reduction: the kind, plus the scalar of PREMUL_SUM (each input is multiplied by it before summing).
struct ReduceOp {
  ReduceKind kind = ReduceKind::kSum;
  double scalar = 1.0;

  static ReduceOp Sum() { return {ReduceKind::kSum, 1.0}; }
  static ReduceOp Prod() { return {ReduceKind::kProd, 1.0}; }
  static ReduceOp Min() { return {ReduceKind::kMin, 1.0}; }
  static ReduceOp Max() { return {ReduceKind::kMax, 1.0}; }
  static ReduceOp Avg() { return {ReduceKind::kAvg, 1.0}; }
  static ReduceOp PreMulSum(double scalar) { return {ReduceKind::kPreMulSum, scalar}; }
  static ReduceOp Band() { return {ReduceKind::kBand, 1.0}; }
  static ReduceOp Bor() { return {ReduceKind::kBor, 1.0}; }
  static ReduceOp Bxor() { return {ReduceKind::kBxor, 1.0}; }
  std::string ToString() const;
};

enum class MemoryKind : std::uint8_t { kHost, kDevice };
std::string_view ToString(MemoryKind kind);

enum class CollectiveKind : std::uint8_t {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kAllgatherv,
  kReduceScatter,
  kReduceScatterV,
  kAlltoall,
  kAlltoallv,
  kGather,
  kScatter,
  kBarrier,
  kSend,
  kRecv,
};
inline constexpr int kNumCollectiveKinds = 14;

std::string_view ToString(CollectiveKind kind);
// Whether the collective reduces (takes a ReduceOp).
bool IsReduction(CollectiveKind kind);
// False only for a reduction the element type has no meaning for (BAND/BOR/BXOR on floating types).
bool IsDefinedReduction(CollectiveKind kind, DataType dtype, ReduceKind op);

}  // namespace commkit
