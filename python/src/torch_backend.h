// CommkitBackend: a c10d::Backend (torch.distributed's backend interface) that runs every operation on
// commkit process groups: CPU tensors on a host backend ("host" by default; COMMKIT_TORCH_HOST_BACKEND
// or commkit.set_host_backend() pick another; commkit/__init__.py refuses "gloo" inside torch), CUDA tensors on "nccl" (that group is created
// on the first CUDA operation, which every rank issues). Both groups share the store, rank, size and
// timeout that init_process_group hands the backend (through C10dStore).
//
// Semantics kept from torch.distributed: async_op Works with wait()/is_completed()/exception()/
// get_future(); non-contiguous tensors are reduced through contiguous copies and copied back; list
// forms are flattened into one commkit call where sizes allow. commkit's errors (the per-rank diff of
// a mismatch, the ranks that never arrived or died) become torch.distributed.DistBackendError with
// commkit's full message; invalid arguments and unsupported combinations raise at the call.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "commkit/comm/process_group.h"
#include "work.h"

namespace commkit::torch_ext {

struct BackendConfig {
  std::string host_backend = "host";    // for CPU tensors
  std::string device_backend = "nccl";  // for CUDA tensors
};

class CommkitBackend final : public c10d::Backend {
 public:
  CommkitBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                 BackendConfig config);
  ~CommkitBackend() override;

  const std::string getBackendName() const override { return "commkit"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return ops_issued_; }
  void shutdown() override;

  // What ran: the host group's commkit backend, and the device group's once created ("" before).
  std::string HostBackendName() const;
  std::string DeviceBackendName() const;
  // The CPU group, for callers that drive commkit directly (benchmarks of this glue).
  ProcessGroup& host_group() { return *host_pg_; }

 private:
  // One torch operation as commkit calls: `issue` starts them (appending their Works), `finalize` runs
  // after all succeeded (copies back into non-contiguous or list outputs), `outputs` are the tensors
  // the Work's future holds. Every operation (ops_*.cc) goes through here.
  using Issue = std::function<Status(ProcessGroup&, const OpOptions&, std::vector<ProcessGroup::WorkPtr>&)>;
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, const at::Device& device, std::vector<at::Tensor> outputs,
                                     Issue issue, std::function<void()> finalize, std::chrono::milliseconds timeout);
  ProcessGroup& GroupFor(const at::Device& device);
  void CompleterLoop();

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  BackendConfig config_;
  std::unique_ptr<ProcessGroup> host_pg_;
  std::mutex device_mu_;
  std::unique_ptr<ProcessGroup> device_pg_;
  int device_index_ = -1;
  std::atomic<std::uint64_t> ops_issued_{0};

  // Completes CPU Works that did not finish inline (so futures and DDP hooks progress without a wait()).
  std::mutex completer_mu_;
  std::condition_variable completer_cv_;
  std::deque<c10::intrusive_ptr<CommkitWork>> pending_;
  bool stopping_ = false;
  std::thread completer_;
};

}  // namespace commkit::torch_ext
