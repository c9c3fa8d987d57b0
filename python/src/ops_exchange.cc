// CommkitBackend's pairwise exchanges: all_to_all (single with splits, and list), send and recv.
#include "torch_backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "op_args.h"

namespace commkit::torch_ext {

using WorkPtr = ProcessGroup::WorkPtr;

c10::intrusive_ptr<c10d::Work> CommkitBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions& opts) {
  at::Device dev = OneDevice({output, input}, "all_to_all_single");
  SameType({output}, input.scalar_type(), "all_to_all_single");
  const int p = getSize();
  Elems e = MoveType(input.scalar_type());
  // Splits count rows (dim 0); empty splits mean equal parts.
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    std::vector<std::size_t> out;
    if (splits.empty()) {
      TORCH_CHECK_VALUE(t.numel() % p == 0, "commkit: all_to_all_single: the ", which, " tensor's ", t.numel(),
                        " elements do not split evenly over ", p, " ranks");
      out.assign(p, static_cast<std::size_t>(t.numel() / p) * e.per_element);
      return out;
    }
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == p, "commkit: all_to_all_single: ", splits.size(), " ",
                      which, " splits for ", p, " ranks");
    TORCH_CHECK_VALUE(t.dim() >= 1, "commkit: all_to_all_single: splits need a tensor with a first dimension");
    const int64_t row = t.size(0) == 0 ? 0 : t.numel() / t.size(0);
    int64_t rows = 0;
    for (int64_t s : splits) {
      TORCH_CHECK_VALUE(s >= 0, "commkit: all_to_all_single: negative split ", s);
      rows += s;
      out.push_back(static_cast<std::size_t>(s * row) * e.per_element);
    }
    TORCH_CHECK_VALUE(rows == t.size(0), "commkit: all_to_all_single: ", which, " splits sum to ", rows, " rows, the ",
                      which, " tensor has ", t.size(0));
    return out;
  };
  auto send_counts = counts(input, input_splits, "input");
  auto recv_counts = counts(output, output_splits, "output");
  Dense in(input), out(output);
  const bool even = input_splits.empty() && output_splits.empty();
  return Run(
      c10d::OpType::ALLTOALL_BASE, dev, {output},
      [in, out, e, even, send_counts, recv_counts](ProcessGroup& pg, const OpOptions& o,
                                                   std::vector<WorkPtr>& works) -> Status {
        if (even) {
          COMMKIT_ISSUE(pg.Alltoall(in.ptr(), out.ptr(), send_counts.front(), e.type, o));
        } else {
          COMMKIT_ISSUE(pg.Alltoallv(in.ptr(), send_counts, out.ptr(), recv_counts, e.type, o));
        }
        return Status::Ok();
      },
      [out] { out.CopyBack(); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  const int p = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == p && static_cast<int>(inputs.size()) == p,
                    "commkit: all_to_all: needs ", p, " input and ", p, " output tensors");
  std::vector<at::Tensor> both(outputs);
  both.insert(both.end(), inputs.begin(), inputs.end());
  at::Device dev = OneDevice(both, "all_to_all");
  SameType(both, inputs[0].scalar_type(), "all_to_all");
  Elems e = MoveType(inputs[0].scalar_type());
  auto send_counts = Numels(inputs, e);
  auto recv_counts = Numels(outputs, e);
  at::Tensor in = Flat(inputs);
  int64_t total = 0;
  for (const auto& t : outputs) total += t.numel();
  at::Tensor flat = at::empty({total}, inputs[0].options());
  return Run(
      c10d::OpType::ALLTOALL, dev, outputs,
      [in, flat, e, send_counts, recv_counts](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Alltoallv(in.data_ptr(), send_counts, flat.data_ptr(), recv_counts, e.type, o));
        return Status::Ok();
      },
      [flat, outputs] { Unflat(flat, outputs); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "commkit: send takes one tensor, got ", tensors.size());
  at::Device dev = OneDevice(tensors, "send");
  TORCH_CHECK_VALUE(dst_rank >= 0 && dst_rank < getSize() && dst_rank != getRank(), "commkit: send to rank ", dst_rank,
                    " (group of ", getSize(), ", this is rank ", getRank(), ")");
  Dense b(tensors[0]);
  return Run(
      c10d::OpType::SEND, dev, tensors,
      [b, dst_rank, tag](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        Elems e = MoveType(b.buf.scalar_type());
        COMMKIT_ISSUE(pg.Send(b.ptr(), Count(b.buf, e), e.type, dst_rank, tag, o));
        return Status::Ok();
      },
      nullptr, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "commkit: recv takes one tensor, got ", tensors.size());
  at::Device dev = OneDevice(tensors, "recv");
  TORCH_CHECK_VALUE(src_rank >= 0 && src_rank < getSize() && src_rank != getRank(), "commkit: recv from rank ",
                    src_rank, " (group of ", getSize(), ", this is rank ", getRank(), ")");
  Dense b(tensors[0]);
  return Run(
      c10d::OpType::RECV, dev, tensors,
      [b, src_rank, tag](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        Elems e = MoveType(b.buf.scalar_type());
        COMMKIT_ISSUE(pg.Recv(b.ptr(), Count(b.buf, e), e.type, src_rank, tag, o));
        return Status::Ok();
      },
      [b] { b.CopyBack(); }, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) {
  C10_THROW_ERROR(NotImplementedError,
                  "commkit: recv from any source is not supported; pass src= (commkit matches sends and receives "
                  "per peer, in order)");
}

}  // namespace commkit::torch_ext
