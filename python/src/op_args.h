// The argument handling every CommkitBackend operation shares: checks that refuse what commkit cannot
// run (with ValueError at the call, before any communication), contiguous buffers for non-contiguous
// tensors, lists laid end to end, roots and timeouts in commkit's terms.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtype_map.h"

namespace commkit::torch_ext {

// ValueError unless t is a defined dense tensor on the CPU or a CUDA device.
void CheckDense(const at::Tensor& t, const char* what);
// The one device of a non-empty list of dense tensors (ValueError for mixed devices).
at::Device OneDevice(const std::vector<at::Tensor>& tensors, const char* what);
// ValueError unless every tensor has the given dtype.
void SameType(const std::vector<at::Tensor>& tensors, at::ScalarType type, const char* what);

// A contiguous tensor holding t's data: t itself when it is contiguous, else a copy that CopyBack writes
// into t after the operation.
struct Dense {
  at::Tensor orig, buf;
  explicit Dense(const at::Tensor& t);
  void CopyBack() const;
  void* ptr() const { return buf.data_ptr(); }
};

// The tensors' sizes in commkit elements.
std::vector<std::size_t> Numels(const std::vector<at::Tensor>& tensors, const Elems& e);
bool AllEqual(const std::vector<std::size_t>& v);

// The tensors of a non-empty list laid end to end in one contiguous 1-D buffer.
at::Tensor Flat(const std::vector<at::Tensor>& tensors);
// Copies consecutive slices of `flat` (in torch elements) into `tensors`.
void Unflat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

// c10d's "no timeout given" as commkit's (0: the group's timeout).
std::chrono::milliseconds OpTimeout(std::chrono::milliseconds requested);
// A root rank checked against the group size (ValueError).
int Root(int64_t root, int size, const char* what);

}  // namespace commkit::torch_ext

// Inside an operation's Issue function: issues one commkit call and keeps its Work in `works`, or
// returns the call's error.
#define COMMKIT_ISSUE(expr)                      \
  do {                                           \
    auto issued_ = (expr);                       \
    if (!issued_.ok()) return issued_.status();  \
    works.push_back(std::move(issued_).value()); \
  } while (false)
