#include "dtype_map.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace commkit::torch_ext {

std::optional<DataType> ReduceType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUInt8;
    case at::kBool: return DataType::kUInt8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default: return std::nullopt;
  }
}

Elems MoveType(at::ScalarType t) {
  if (t != at::kBool) {
    if (auto d = ReduceType(t)) return {*d, 1};
  }
  return {DataType::kUInt8, c10::elementSize(t)};
}

Reduction ToReduction(const c10d::ReduceOp& rop, at::ScalarType dtype) {
  ReduceOp op;
  switch (rop.op_) {
    case c10d::ReduceOp::SUM: op = ReduceOp::Sum(); break;
    case c10d::ReduceOp::AVG: op = ReduceOp::Avg(); break;
    case c10d::ReduceOp::PRODUCT: op = ReduceOp::Prod(); break;
    case c10d::ReduceOp::MIN: op = ReduceOp::Min(); break;
    case c10d::ReduceOp::MAX: op = ReduceOp::Max(); break;
    case c10d::ReduceOp::BAND: op = ReduceOp::Band(); break;
    case c10d::ReduceOp::BOR: op = ReduceOp::Bor(); break;
    case c10d::ReduceOp::BXOR: op = ReduceOp::Bxor(); break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK_VALUE(sup != nullptr, "commkit: PREMUL_SUM without its factor");
      double f = sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      op = ReduceOp::PreMulSum(f);
      break;
    }
    default: TORCH_CHECK_VALUE(false, "commkit: unknown reduce op ", static_cast<int>(rop.op_));
  }
  if (dtype == at::kBool) {
    if (op.kind == ReduceKind::kSum) op = ReduceOp::Max();
    if (op.kind == ReduceKind::kProd) op = ReduceOp::Min();
    TORCH_CHECK_VALUE(op.kind != ReduceKind::kAvg && op.kind != ReduceKind::kPreMulSum,
                      "commkit: ", op.ToString(), " is not defined on bool tensors");
  }
  if (at::isComplexType(dtype)) {
    TORCH_CHECK_VALUE(op.kind == ReduceKind::kSum || op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPreMulSum,
                      "commkit: ", op.ToString(), " is not defined on complex tensors (only SUM, AVG, PREMUL_SUM)");
    auto real = ReduceType(c10::toRealValueType(dtype));
    TORCH_CHECK_VALUE(real.has_value(), "commkit: cannot reduce ", dtype);
    return {*real, op, 2};
  }
  auto t = ReduceType(dtype);
  TORCH_CHECK_VALUE(t.has_value(), "commkit: cannot reduce tensors of type ", dtype,
                    " (commkit reduces float32/64, float16, bfloat16, int8, uint8, int32, int64, bool, complex)");
  return {*t, op, 1};
}

}  // namespace commkit::torch_ext
