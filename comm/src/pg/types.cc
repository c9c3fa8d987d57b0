#include "commkit/comm/types.h"

#include "commkit/common/strings.h"

namespace commkit {

std::size_t SizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

std::string_view ToString(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "f32";
    case DataType::kFloat64: return "f64";
    case DataType::kFloat16: return "f16";
    case DataType::kBFloat16: return "bf16";
    case DataType::kInt8: return "i8";
    case DataType::kUInt8: return "u8";
    case DataType::kInt32: return "i32";
    case DataType::kInt64: return "i64";
  }
  return "?";
}

bool IsFloatingPoint(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

std::string_view ToString(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProd: return "prod";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kAvg: return "avg";
    case ReduceKind::kPreMulSum: return "premul_sum";
    case ReduceKind::kBand: return "band";
    case ReduceKind::kBor: return "bor";
    case ReduceKind::kBxor: return "bxor";
  }
  return "?";
}

std::string ReduceOp::ToString() const {
  if (kind == ReduceKind::kPreMulSum) return StrCat("premul_sum(", scalar, ")");
  return std::string(commkit::ToString(kind));
}

std::string_view ToString(MemoryKind kind) { return kind == MemoryKind::kHost ? "host" : "device"; }

std::string_view ToString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kAllgatherv: return "allgatherv";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kReduceScatterV: return "reduce_scatter_v";
    case CollectiveKind::kAlltoall: return "alltoall";
    case CollectiveKind::kAlltoallv: return "alltoallv";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
  }
  return "?";
}

bool IsReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kReduceScatterV;
}

bool IsDefinedReduction(CollectiveKind kind, DataType dtype, ReduceKind op) {
  const bool bitwise = op == ReduceKind::kBand || op == ReduceKind::kBor || op == ReduceKind::kBxor;
  return !(IsReduction(kind) && IsFloatingPoint(dtype) && bitwise);
}

}  // namespace commkit
