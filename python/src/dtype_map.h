// torch dtypes and ReduceOps as commkit element types and reductions.
// - Reductions: float32/64, float16, bfloat16, int8, uint8, int32, int64 natively; bool as uint8 (SUM as
//   MAX, PRODUCT as MIN: logical or / and, as torch's NCCL backend does); complex as pairs of reals for
//   SUM, AVG and PREMUL_SUM. Anything else is refused with ValueError naming the dtype.
// - Operations that only move data carry a tensor as its own commkit type where commkit has one (the
//   mismatch diff then shows real types and counts), else as bytes (complex, int16, float8, ...).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <optional>

#include "commkit/comm/types.h"

namespace commkit::torch_ext {

// The commkit element type of a tensor for reductions, or nullopt.
std::optional<DataType> ReduceType(at::ScalarType t);

// How a tensor travels through a collective that does not reduce.
struct Elems {
  DataType type;
  std::size_t per_element;  // commkit elements per torch element
};
Elems MoveType(at::ScalarType t);

// A tensor's size in commkit elements.
inline std::size_t Count(const at::Tensor& t, const Elems& e) {
  return static_cast<std::size_t>(t.numel()) * e.per_element;
}

struct Reduction {
  DataType type;
  ReduceOp op;
  std::size_t per_element;  // commkit elements per torch element (2 for complex)
};

// torch's ReduceOp on a dtype as a commkit reduction; ValueError when commkit cannot reduce it.
Reduction ToReduction(const c10d::ReduceOp& rop, at::ScalarType dtype);

}  // namespace commkit::torch_ext
