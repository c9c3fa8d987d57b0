// commkit's element types and reductions as NCCL's enums: one mapping for the NCCL backend and for
// commkit-bench's raw NCCL baseline, so both always hand NCCL the same type for the same DataType.
//
// Unlike the backend's other headers this one includes <nccl.h>: include it only from code compiled
// against NCCL.
#pragma once

#include <nccl.h>

#include <optional>

#include "commkit/comm/types.h"

namespace commkit::comm::nccl {

// Every DataType has an NCCL type; nullopt only for a value outside the enum.
inline std::optional<ncclDataType_t> NcclDataType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return std::nullopt;
}

// sum, prod, min, max and avg; nullopt for PREMUL_SUM (an op NCCL creates per call with its scalar:
// ncclRedOpCreatePreMulSum) and for the bitwise reductions NCCL does not have.
inline std::optional<ncclRedOp_t> NcclRedOp(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return ncclSum;
    case ReduceKind::kProd: return ncclProd;
    case ReduceKind::kMin: return ncclMin;
    case ReduceKind::kMax: return ncclMax;
    case ReduceKind::kAvg: return ncclAvg;
    default: return std::nullopt;
  }
}

}  // namespace commkit::comm::nccl
