// CommkitBackend's reducing operations: allreduce (and coalesced), reduce, reduce_scatter (list, tensor,
// coalesced).
#include "torch_backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "op_args.h"

namespace commkit::torch_ext {

using WorkPtr = ProcessGroup::WorkPtr;

c10::intrusive_ptr<c10d::Work> CommkitBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  at::Device dev = OneDevice(tensors, "allreduce");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "commkit: sparse allreduce is not supported");
  std::vector<Dense> bufs;
  std::vector<Reduction> reds;
  for (const auto& t : tensors) {
    bufs.emplace_back(t);
    reds.push_back(ToReduction(opts.reduceOp, t.scalar_type()));
  }
  return Run(
      c10d::OpType::ALLREDUCE, dev, tensors,
      [bufs, reds](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (std::size_t i = 0; i < bufs.size(); ++i)
          COMMKIT_ISSUE(pg.Allreduce(bufs[i].ptr(), bufs[i].ptr(), bufs[i].buf.numel() * reds[i].per_element,
                                     reds[i].type, reds[i].op, o));
        return Status::Ok();
      },
      [bufs] {
        for (const auto& b : bufs) b.CopyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceCoalescedOptions& opts) {
  at::Device dev = OneDevice(tensors, "allreduce_coalesced");
  SameType(tensors, tensors[0].scalar_type(), "allreduce_coalesced");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "commkit: sparse allreduce is not supported");
  Reduction red = ToReduction(opts.reduceOp, tensors[0].scalar_type());
  at::Tensor flat = Flat(tensors);  // one commkit call for the whole list
  return Run(
      c10d::OpType::ALLREDUCE_COALESCED, dev, tensors,
      [flat, red](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Allreduce(flat.data_ptr(), flat.data_ptr(), flat.numel() * red.per_element, red.type, red.op, o));
        return Status::Ok();
      },
      [flat, tensors] { Unflat(flat, tensors); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Device dev = OneDevice(tensors, "reduce");
  int root = Root(opts.rootRank, getSize(), "reduce");
  const bool is_root = root == getRank();
  std::vector<Dense> bufs(tensors.begin(), tensors.end());
  std::vector<Reduction> reds;
  for (const auto& t : tensors) reds.push_back(ToReduction(opts.reduceOp, t.scalar_type()));
  return Run(
      c10d::OpType::REDUCE, dev, tensors,
      [bufs, reds, root, is_root](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (std::size_t i = 0; i < bufs.size(); ++i)
          COMMKIT_ISSUE(pg.Reduce(bufs[i].ptr(), is_root ? bufs[i].ptr() : nullptr,
                                  bufs[i].buf.numel() * reds[i].per_element, reds[i].type, reds[i].op, root, o));
        return Status::Ok();
      },
      [bufs, is_root] {
        if (!is_root) return;
        for (const auto& b : bufs) b.CopyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1, "commkit: reduce_scatter takes one output and one list");
  TORCH_CHECK_VALUE(static_cast<int>(inputs[0].size()) == getSize(), "commkit: reduce_scatter: the input list has ",
                    inputs[0].size(), " tensors for a group of ", getSize());
  std::vector<at::Tensor> both(inputs[0]);
  both.push_back(outputs[0]);
  at::Device dev = OneDevice(both, "reduce_scatter");
  SameType(both, outputs[0].scalar_type(), "reduce_scatter");
  Reduction red = ToReduction(opts.reduceOp, outputs[0].scalar_type());
  std::vector<std::size_t> counts;
  for (const auto& t : inputs[0]) counts.push_back(static_cast<std::size_t>(t.numel()) * red.per_element);
  TORCH_CHECK_VALUE(counts[getRank()] == static_cast<std::size_t>(outputs[0].numel()) * red.per_element,
                    "commkit: reduce_scatter: this rank's input slot has ", inputs[0][getRank()].numel(),
                    " elements, the output ", outputs[0].numel());
  at::Tensor flat = Flat(inputs[0]);
  Dense out(outputs[0]);
  return Run(
      c10d::OpType::REDUCE_SCATTER, dev, outputs,
      [flat, out, red, counts](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        if (AllEqual(counts)) {
          COMMKIT_ISSUE(pg.ReduceScatter(flat.data_ptr(), out.ptr(), counts.front(), red.type, red.op, o));
        } else {
          COMMKIT_ISSUE(pg.ReduceScatterV(flat.data_ptr(), out.ptr(), counts, red.type, red.op, o));
        }
        return Status::Ok();
      },
      [out] { out.CopyBack(); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& opts) {
  at::Device dev = OneDevice({output, input}, "reduce_scatter_tensor");
  SameType({output}, input.scalar_type(), "reduce_scatter_tensor");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), "commkit: reduce_scatter_tensor: input has ",
                    input.numel(), " elements, expected ", getSize(), " x ", output.numel());
  Reduction red = ToReduction(opts.reduceOp, input.scalar_type());
  Dense in(input), out(output);
  return Run(
      c10d::OpType::_REDUCE_SCATTER_BASE, dev, {output},
      [in, out, red](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.ReduceScatter(in.ptr(), out.ptr(), out.buf.numel() * red.per_element, red.type, red.op, o));
        return Status::Ok();
      },
      [out] { out.CopyBack(); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "commkit: reduce_scatter_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<at::Tensor> both(outputs);
  both.insert(both.end(), inputs.begin(), inputs.end());
  at::Device dev = OneDevice(both, "reduce_scatter_tensor_coalesced");
  std::vector<Dense> ins(inputs.begin(), inputs.end()), outs(outputs.begin(), outputs.end());
  std::vector<Reduction> reds;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * getSize() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      "commkit: reduce_scatter_tensor_coalesced: input ", i, " is not ", getSize(), " x output ", i);
    reds.push_back(ToReduction(opts.reduceOp, inputs[i].scalar_type()));
  }
  return Run(
      c10d::OpType::COALESCED, dev, outputs,
      [ins, outs, reds](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (std::size_t i = 0; i < ins.size(); ++i)
          COMMKIT_ISSUE(pg.ReduceScatter(ins[i].ptr(), outs[i].ptr(), outs[i].buf.numel() * reds[i].per_element,
                                         reds[i].type, reds[i].op, o));
        return Status::Ok();
      },
      [outs] {
        for (const auto& b : outs) b.CopyBack();
      },
      opts.timeout);
}


}  // namespace commkit::torch_ext
