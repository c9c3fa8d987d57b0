// commkit's element types and reductions as NCCL's enum values: one mapping for the NCCL backend and
// for commkit-bench's raw NCCL baseline, so both hand NCCL the same type for the same DataType.
//
// The values are returned as int so that this header, like the backend's others, needs no <nccl.h>
// (nccl.h: ncclDataType_t and ncclRedOp_t, unchanged since NCCL 2.0; ncclAvg since 2.10). Code that
// includes <nccl.h> first gets them checked against NCCL's own enums at compile time (below).
#pragma once

#include "commkit/comm/types.h"

namespace commkit::comm::nccl {

// ncclDataType_t for `t`; -1 only for a value outside the enum.
constexpr int NcclDataType(DataType t) {
  switch (t) {
    case DataType::kInt8: return 0;      // ncclInt8
    case DataType::kUInt8: return 1;     // ncclUint8
    case DataType::kInt32: return 2;     // ncclInt32
    case DataType::kInt64: return 4;     // ncclInt64
    case DataType::kFloat16: return 6;   // ncclFloat16
    case DataType::kFloat32: return 7;   // ncclFloat32
    case DataType::kFloat64: return 8;   // ncclFloat64
    case DataType::kBFloat16: return 9;  // ncclBfloat16
  }
  return -1;
}

// ncclRedOp_t for sum, prod, min, max and avg; -1 for PREMUL_SUM (an op NCCL creates per call with
// its scalar: ncclRedOpCreatePreMulSum) and for the bitwise reductions NCCL does not have.
constexpr int NcclRedOp(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return 0;   // ncclSum
    case ReduceKind::kProd: return 1;  // ncclProd
    case ReduceKind::kMax: return 2;   // ncclMax
    case ReduceKind::kMin: return 3;   // ncclMin
    case ReduceKind::kAvg: return 4;   // ncclAvg
    default: return -1;
  }
}

}  // namespace commkit::comm::nccl

#ifdef NCCL_MAJOR  // <nccl.h> was included: the numbers above must be NCCL's
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kInt8) == ncclInt8);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kUInt8) == ncclUint8);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kInt32) == ncclInt32);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kInt64) == ncclInt64);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kFloat16) == ncclFloat16);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kFloat32) == ncclFloat32);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kFloat64) == ncclFloat64);
static_assert(commkit::comm::nccl::NcclDataType(commkit::DataType::kBFloat16) == ncclBfloat16);
static_assert(commkit::comm::nccl::NcclRedOp(commkit::ReduceKind::kSum) == ncclSum);
static_assert(commkit::comm::nccl::NcclRedOp(commkit::ReduceKind::kProd) == ncclProd);
static_assert(commkit::comm::nccl::NcclRedOp(commkit::ReduceKind::kMax) == ncclMax);
static_assert(commkit::comm::nccl::NcclRedOp(commkit::ReduceKind::kMin) == ncclMin);
static_assert(commkit::comm::nccl::NcclRedOp(commkit::ReduceKind::kAvg) == ncclAvg);
#endif
