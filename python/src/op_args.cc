#include "op_args.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace commkit::torch_ext {

void CheckDense(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "commkit: ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "commkit: ", what, " has layout ", t.layout(),
                    "; only dense (strided) tensors are supported (sparse allreduce is not)");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "commkit: ", what, " is on ", t.device(),
                    "; commkit runs CPU tensors (host backend) and CUDA tensors (nccl)");
}

at::Device OneDevice(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK_VALUE(!tensors.empty(), "commkit: ", what, ": no tensors");
  for (const auto& t : tensors) CheckDense(t, what);
  at::Device d = tensors[0].device();
  for (const auto& t : tensors)
    TORCH_CHECK_VALUE(t.device() == d, "commkit: ", what, ": tensors on ", d, " and ", t.device(), " in one call");
  return d;
}

void SameType(const std::vector<at::Tensor>& tensors, at::ScalarType type, const char* what) {
  for (const auto& t : tensors)
    TORCH_CHECK_VALUE(t.scalar_type() == type, "commkit: ", what, ": tensors of type ", type, " and ", t.scalar_type(),
                      " in one call");
}

Dense::Dense(const at::Tensor& t) : orig(t), buf(t.is_contiguous() ? t : t.contiguous()) {}

void Dense::CopyBack() const {
  if (!buf.is_same(orig)) orig.copy_(buf);
}

std::vector<std::size_t> Numels(const std::vector<at::Tensor>& tensors, const Elems& e) {
  std::vector<std::size_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(Count(t, e));
  return out;
}

bool AllEqual(const std::vector<std::size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](std::size_t x) { return x == v.front(); });
}

at::Tensor Flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void Unflat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t off = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

std::chrono::milliseconds OpTimeout(std::chrono::milliseconds requested) {
  return requested == c10d::kUnsetTimeout ? std::chrono::milliseconds(0) : requested;
}

int Root(int64_t root, int size, const char* what) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "commkit: ", what, ": root ", root, " is not a rank of this group of ",
                    size);
  return static_cast<int>(root);
}

}  // namespace commkit::torch_ext
