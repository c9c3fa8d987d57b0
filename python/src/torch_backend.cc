#include "torch_backend.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <cstdlib>

#include "errors.h"
#include "op_args.h"
#include "store_adapter.h"

namespace commkit::torch_ext {

using WorkPtr = ProcessGroup::WorkPtr;

namespace {

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

CommkitBackend::CommkitBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout, BackendConfig config)
    : c10d::Backend(rank, size), store_(store), timeout_(timeout), config_(std::move(config)) {
  ProcessGroupOptions o;
  o.backend = config_.host_backend;
  o.name = "cpu";
  o.timeout = timeout;
  o.local_rank = static_cast<int>(std::strtol(Env("LOCAL_RANK", "-1").c_str(), nullptr, 10));
  auto adapter = std::make_shared<C10dStore>(store_, "torch.distributed store");
  auto pg = ProcessGroup::Create(adapter, rank, size, o);
  if (!pg.ok()) Throw(pg.status());
  host_pg_ = std::move(pg).value();
  completer_ = std::thread([this] { CompleterLoop(); });
}

CommkitBackend::~CommkitBackend() { shutdown(); }

void CommkitBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(completer_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  completer_cv_.notify_all();
  if (completer_.joinable()) completer_.join();
}

c10::intrusive_ptr<c10d::Backend::Options> CommkitBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("commkit", timeout_);
}

std::string CommkitBackend::HostBackendName() const { return std::string(host_pg_->backend_name()); }
std::string CommkitBackend::DeviceBackendName() const {
  auto* self = const_cast<CommkitBackend*>(this);
  std::lock_guard<std::mutex> lock(self->device_mu_);
  return device_pg_ ? std::string(device_pg_->backend_name()) : std::string();
}

ProcessGroup& CommkitBackend::GroupFor(const at::Device& device) {
  if (device.is_cpu()) return *host_pg_;
  std::lock_guard<std::mutex> lock(device_mu_);
  if (device_pg_) {
    TORCH_CHECK_VALUE(device.index() == device_index_, "commkit: this group runs on cuda:", device_index_,
                      " (its first CUDA operation); got a tensor on ", device);
    return *device_pg_;
  }
  ProcessGroupOptions o;
  o.backend = config_.device_backend;
  o.memory = MemoryKind::kDevice;
  o.name = "cuda";
  o.timeout = timeout_;
  o.device = device.has_index() ? device.index() : 0;
  auto adapter = std::make_shared<C10dStore>(store_, "torch.distributed store");
  auto pg = ProcessGroup::Create(adapter, getRank(), getSize(), o);
  if (!pg.ok()) Throw(pg.status());
  device_pg_ = std::move(pg).value();
  device_index_ = o.device;
  return *device_pg_;
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::Run(c10d::OpType type, const at::Device& device,
                                                   std::vector<at::Tensor> outputs, Issue issue,
                                                   std::function<void()> finalize, std::chrono::milliseconds timeout) {
  ProcessGroup& pg = GroupFor(device);
  OpOptions o;
  o.timeout = OpTimeout(timeout);
  std::vector<c10::Device> devices;
  if (device.is_cuda()) {
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    o.memory = MemoryKind::kDevice;
    o.stream = impl.getStream(device).native_handle();
    devices.push_back(device);
  }
  std::vector<WorkPtr> works;
  Status s = issue(pg, o, works);
  ++ops_issued_;
  if (!s.ok()) {
    // Operations already issued by this call complete before the error is raised.
    for (auto& w : works) (void)w->Wait();
    Throw(s);
  }
  auto work = c10::make_intrusive<CommkitWork>(getRank(), type, std::move(works), std::move(finalize),
                                               std::move(outputs), std::move(devices));
  // CUDA: Wait() orders the caller's stream after the operation without blocking; the copy-backs and
  // the future's events follow on the same stream. CPU: done inline when small, else the completer.
  if (device.is_cuda() || work->AllTested()) {
    work->Complete();
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(completer_mu_);
    TORCH_CHECK(!stopping_, "commkit: the backend was shut down");
    pending_.push_back(work);
  }
  completer_cv_.notify_one();
  return work;
}

void CommkitBackend::CompleterLoop() {
  while (true) {
    c10::intrusive_ptr<CommkitWork> work;
    {
      std::unique_lock<std::mutex> lock(completer_mu_);
      completer_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      work = std::move(pending_.front());
      pending_.pop_front();
    }
    work->Complete();
  }
}

c10::intrusive_ptr<c10d::Work> CommkitBackend::barrier(const c10d::BarrierOptions& opts) {
  return Run(
      c10d::OpType::BARRIER, at::Device(at::kCPU), {},
      [](ProcessGroup& pg, const OpOptions& o, std::vector<WorkPtr>& works) -> Status {
        COMMKIT_ISSUE(pg.Barrier(o));
        return Status::Ok();
      },
      nullptr, opts.timeout);
}

void CommkitBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool /*wait_all_ranks*/) {
  // commkit's barrier names the ranks that did not arrive in its timeout error already.
  barrier(opts)->wait();
}


}  // namespace commkit::torch_ext
