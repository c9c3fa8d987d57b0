// CommkitBackend's operations that move data from or to one or all ranks: broadcast, all_gather (list,
// tensor, coalesced forms), gather, scatter.
#include "torch_backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "op_args.h"

namespace commkit::torch_ext {

using WorkPtr = ProcessGroup::WorkPtr;

c10::intrusive_ptr<c10d::Work> CommkitBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  at::Device dev = OneDevice(tensors, "broadcast");
  int root = Root(opts.rootRank, getSize(), "broadcast");
  std::vector<Dense> bufs(tensors.begin(), tensors.end());
  const bool is_root = root == getRank();
  return Run(
      c10d::OpType::BROADCAST, dev, tensors,
      [bufs, root](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (const auto& b : bufs) {
          Elems e = MoveType(b.buf.scalar_type());
          COMMKIT_ISSUE(pg.Broadcast(b.ptr(), Count(b.buf, e), e.type, root, o));
        }
        return Status::Ok();
      },
      [bufs, is_root] {
        if (is_root) return;
        for (const auto& b : bufs) b.CopyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions& opts) {
  at::Device dev = OneDevice({output, input}, "all_gather_into_tensor");
  SameType({output}, input.scalar_type(), "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "commkit: all_gather_into_tensor: output has ",
                    output.numel(), " elements, expected ", getSize(), " x ", input.numel());
  Dense in(input), out(output);
  return Run(
      c10d::OpType::_ALLGATHER_BASE, dev, {output},
      [in, out](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        Elems e = MoveType(in.buf.scalar_type());
        COMMKIT_ISSUE(pg.Allgather(in.ptr(), out.ptr(), Count(in.buf, e), e.type, o));
        return Status::Ok();
      },
      [out] { out.CopyBack(); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "commkit: all_gather: ", outputs.size(), " output lists for ",
                    inputs.size(), " inputs");
  at::Device dev = OneDevice(inputs, "all_gather");
  std::vector<at::Tensor> all_outputs;
  struct One {
    Dense in;
    std::vector<at::Tensor> outs;
    at::Tensor flat;
    std::vector<std::size_t> counts;  // commkit elements per rank
    Elems e;
  };
  std::vector<One> ops;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_VALUE(static_cast<int>(outputs[i].size()) == getSize(), "commkit: all_gather: the output list has ",
                      outputs[i].size(), " tensors for a group of ", getSize());
    OneDevice(outputs[i], "all_gather outputs");
    SameType(outputs[i], inputs[i].scalar_type(), "all_gather");
    Elems e = MoveType(inputs[i].scalar_type());
    auto counts = Numels(outputs[i], e);
    TORCH_CHECK_VALUE(counts[getRank()] == Count(inputs[i], e), "commkit: all_gather: this rank's output slot has ",
                      outputs[i][getRank()].numel(), " elements, its input ", inputs[i].numel());
    int64_t total = 0;
    for (const auto& t : outputs[i]) total += t.numel();
    at::Tensor flat = at::empty({total}, inputs[i].options().memory_format(at::MemoryFormat::Contiguous));
    ops.push_back({Dense(inputs[i]), outputs[i], flat, counts, e});
    for (const auto& t : outputs[i]) all_outputs.push_back(t);
  }
  return Run(
      c10d::OpType::ALLGATHER, dev, all_outputs,
      [ops](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (const auto& op : ops) {
          if (AllEqual(op.counts)) {
            COMMKIT_ISSUE(pg.Allgather(op.in.ptr(), op.flat.data_ptr(), op.counts.front(), op.e.type, o));
          } else {
            COMMKIT_ISSUE(pg.Allgatherv(op.in.ptr(), op.flat.data_ptr(), op.counts, op.e.type, o));
          }
        }
        return Status::Ok();
      },
      [ops] {
        for (const auto& op : ops) Unflat(op.flat, op.outs);
      },
      opts.timeout);
}

// outputs[r][i] receives rank r's inputs[i] (torch's all_gather_coalesced). Every rank's inputs have the
// same shapes, so the whole list travels as one allgather of the inputs laid end to end.
c10::intrusive_ptr<c10d::Work> CommkitBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) {
  const int p = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == p, "commkit: all_gather_coalesced: ", outputs.size(),
                    " output lists for a group of ", p, " (one list per rank)");
  at::Device dev = OneDevice(inputs, "all_gather_coalesced");
  SameType(inputs, inputs[0].scalar_type(), "all_gather_coalesced");
  std::vector<at::Tensor> all_outputs;
  for (int r = 0; r < p; ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "commkit: all_gather_coalesced: output list ", r, " has ",
                      outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    OneDevice(outputs[r], "all_gather_coalesced outputs");
    SameType(outputs[r], inputs[0].scalar_type(), "all_gather_coalesced");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      TORCH_CHECK_VALUE(outputs[r][i].numel() == inputs[i].numel(), "commkit: all_gather_coalesced: output ", r, "/",
                        i, " has ", outputs[r][i].numel(), " elements, input ", i, " has ", inputs[i].numel());
      all_outputs.push_back(outputs[r][i]);
    }
  }
  Elems e = MoveType(inputs[0].scalar_type());
  at::Tensor in = Flat(inputs);
  at::Tensor flat = at::empty({in.numel() * p}, in.options());
  return Run(
      c10d::OpType::ALLGATHER_COALESCED, dev, all_outputs,
      [in, flat, e](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Allgather(in.data_ptr(), flat.data_ptr(), Count(in, e), e.type, o));
        return Status::Ok();
      },
      [flat, all_outputs] { Unflat(flat, all_outputs); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "commkit: all_gather_into_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<at::Tensor> both(outputs);
  both.insert(both.end(), inputs.begin(), inputs.end());
  at::Device dev = OneDevice(both, "all_gather_into_tensor_coalesced");
  std::vector<Dense> ins(inputs.begin(), inputs.end()), outs(outputs.begin(), outputs.end());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * getSize() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      "commkit: all_gather_into_tensor_coalesced: output ", i, " does not hold ", getSize(),
                      " copies of input ", i);
  return Run(
      c10d::OpType::COALESCED, dev, outputs,
      [ins, outs](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        for (std::size_t i = 0; i < ins.size(); ++i) {
          Elems e = MoveType(ins[i].buf.scalar_type());
          COMMKIT_ISSUE(pg.Allgather(ins[i].ptr(), outs[i].ptr(), Count(ins[i].buf, e), e.type, o));
        }
        return Status::Ok();
      },
      [outs] {
        for (const auto& b : outs) b.CopyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK_VALUE(inputs.size() == 1, "commkit: gather takes one input tensor, got ", inputs.size());
  at::Device dev = OneDevice(inputs, "gather");
  int root = Root(opts.rootRank, getSize(), "gather");
  const bool is_root = root == getRank();
  Dense in(inputs[0]);
  Elems e = MoveType(inputs[0].scalar_type());
  std::vector<at::Tensor> outs;
  at::Tensor flat;
  if (is_root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "commkit: gather: the root needs one list of ", getSize(), " output tensors");
    outs = outputs[0];
    OneDevice(outs, "gather outputs");
    SameType(outs, inputs[0].scalar_type(), "gather");
    for (const auto& t : outs)
      TORCH_CHECK_VALUE(t.numel() == inputs[0].numel(), "commkit: gather: output tensors must have the input's ",
                        inputs[0].numel(), " elements (got ", t.numel(), ")");
    flat = at::empty({inputs[0].numel() * getSize()}, inputs[0].options());
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "commkit: gather: only the root passes output tensors");
  }
  return Run(
      c10d::OpType::GATHER, dev, outs,
      [in, flat, e, root](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Gather(in.ptr(), flat.defined() ? flat.data_ptr() : nullptr, Count(in.buf, e), e.type, root, o));
        return Status::Ok();
      },
      [flat, outs] {
        if (flat.defined()) Unflat(flat, outs);
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == 1, "commkit: scatter takes one output tensor, got ", outputs.size());
  at::Device dev = OneDevice(outputs, "scatter");
  int root = Root(opts.rootRank, getSize(), "scatter");
  const bool is_root = root == getRank();
  Dense out(outputs[0]);
  Elems e = MoveType(outputs[0].scalar_type());
  at::Tensor flat;
  if (is_root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "commkit: scatter: the root needs one list of ", getSize(), " input tensors");
    OneDevice(inputs[0], "scatter inputs");
    SameType(inputs[0], outputs[0].scalar_type(), "scatter");
    for (const auto& t : inputs[0])
      TORCH_CHECK_VALUE(t.numel() == outputs[0].numel(), "commkit: scatter: input tensors must have the output's ",
                        outputs[0].numel(), " elements (got ", t.numel(), ")");
    flat = Flat(inputs[0]);
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "commkit: scatter: only the root passes input tensors");
  }
  return Run(
      c10d::OpType::SCATTER, dev, outputs,
      [out, flat, e, root](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Scatter(flat.defined() ? flat.data_ptr() : nullptr, out.ptr(), Count(out.buf, e), e.type, root, o));
        return Status::Ok();
      },
      [out] { out.CopyBack(); }, opts.timeout);
}


}  // namespace commkit::torch_ext
