#include "torch_backend.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <numeric>

#include "commkit/common/strings.h"
#include "store_adapter.h"

namespace commkit::torch_ext {

using WorkPtr = ProcessGroup::WorkPtr;

std::exception_ptr ToException(const Status& status) {
  try {
    C10_THROW_ERROR(DistBackendError, StrCat("commkit ", ToString(status.code()), ": ", status.message()));
  } catch (...) {
    return std::current_exception();
  }
}

void Throw(const Status& status) {
  if (status.code() == StatusCode::kInvalidArgument) C10_THROW_ERROR(ValueError, StrCat("commkit: ", status.message()));
  if (status.code() == StatusCode::kNotSupported)
    C10_THROW_ERROR(NotImplementedError, StrCat("commkit: ", status.message()));
  std::rethrow_exception(ToException(status));
}

// A torch Work over the commkit Works of one operation.
class CommkitWork final : public c10d::Work {
 public:
  CommkitWork(int rank, c10d::OpType type, std::vector<WorkPtr> works, std::function<void()> finalize,
              std::vector<at::Tensor> outputs, std::vector<c10::Device> devices)
      : c10d::Work(rank, type),
        works_(std::move(works)),
        finalize_(std::move(finalize)),
        outputs_(std::move(outputs)),
        devices_(std::move(devices)) {}

  // Waits for the commkit Works, runs the copy-backs, then completes this Work and its future.
  // Idempotent and safe from several threads (the caller's wait() and the backend's completer).
  void Complete() {
    std::lock_guard<std::mutex> drive(drive_mu_);
    if (done_) return;
    Status failed;
    for (auto& w : works_) {
      Status s = w->Wait();
      if (!s.ok() && failed.ok()) failed = s;
    }
    if (failed.ok() && finalize_) {
      try {
        finalize_();
      } catch (const std::exception& e) {
        failed = Status::Internal(StrCat("copying results back: ", e.what()));
      }
    }
    finalize_ = nullptr;
    std::exception_ptr error = failed.ok() ? nullptr : ToException(failed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_ = true;
      exception_ = error;
    }
    done_ = true;
    cv_.notify_all();
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(future_mu_);
      finished_ = true;
      future = future_;
    }
    if (future) Settle(*future, error);
  }

  bool AllTested() {
    for (auto& w : works_)
      if (!w->Test()) return false;
    return true;
  }

  bool isCompleted() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_) return true;
    }
    // Never blocks: completes here only when every commkit Work is done and nobody else is completing.
    if (!AllTested()) return false;
    std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
    if (!drive.owns_lock()) return false;
    drive.unlock();
    Complete();
    return true;
  }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      Complete();
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, timeout, [&] { return completed_; }))
        C10_THROW_ERROR(DistBackendError, StrCat("commkit: ", c10d::opTypeToString(opType_),
                                                 " still running after wait(timeout=", timeout.count(), " ms)"));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made on first request (most Works never get asked): a future costs an allocation and a completion.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices_);
      if (finished_) {
        std::exception_ptr error;
        {
          std::lock_guard<std::mutex> l(mutex_);
          error = exception_;
        }
        Settle(*future_, error);
      }
    }
    return future_;
  }
  float getDuration() const override {
    std::chrono::nanoseconds total{0};
    for (const auto& w : works_) total += w->Duration();
    return static_cast<float>(total.count()) / 1e6f;
  }

 private:
  std::mutex drive_mu_;
  bool done_ = false;  // guarded by drive_mu_
  std::vector<WorkPtr> works_;
  std::function<void()> finalize_;
  std::vector<at::Tensor> outputs_;
  std::vector<c10::Device> devices_;
  std::mutex future_mu_;
  bool finished_ = false;  // guarded by future_mu_: Complete() has run
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by future_mu_

  void Settle(c10::ivalue::Future& future, const std::exception_ptr& error) {
    if (error) {
      future.setError(error);
    } else {
      future.markCompleted(c10::IValue(outputs_));
    }
  }
};

namespace {

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// --- tensors ---------------------------------------------------------------------------------------

void CheckDense(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "commkit: ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "commkit: ", what, " has layout ", t.layout(),
                    "; only dense (strided) tensors are supported (sparse allreduce is not)");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "commkit: ", what, " is on ", t.device(),
                    "; commkit runs CPU tensors (host backend) and CUDA tensors (nccl)");
}

// A contiguous tensor holding t's data: t itself when it is contiguous, else a copy that CopyBack writes
// into t after the operation.
struct Dense {
  at::Tensor orig, buf;
  explicit Dense(const at::Tensor& t) : orig(t), buf(t.is_contiguous() ? t : t.contiguous()) {}
  void CopyBack() const {
    if (!buf.is_same(orig)) orig.copy_(buf);
  }
  void* ptr() const { return buf.data_ptr(); }
};

// The commkit element type of a tensor for reductions, or nullopt.
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

// How a tensor travels through a collective that does not reduce: as its own type when commkit has it
// (the mismatch diff then shows real types and counts), else as bytes (complex, int16, float8, ...).
struct Elems {
  DataType type;
  std::size_t per_element;  // commkit elements per torch element
};
Elems MoveType(at::ScalarType t) {
  if (t != at::kBool) {
    if (auto d = ReduceType(t)) return {*d, 1};
  }
  return {DataType::kUInt8, c10::elementSize(t)};
}

std::size_t Count(const at::Tensor& t, const Elems& e) { return static_cast<std::size_t>(t.numel()) * e.per_element; }

struct Reduction {
  DataType type;
  ReduceOp op;
  std::size_t per_element;
};

// torch's ReduceOp on a dtype as a commkit reduction. Bool reduces as uint8 with SUM as MAX and PRODUCT
// as MIN (logical or / and, as torch's NCCL backend does); complex reduces as pairs of reals where the
// operation allows it (SUM, AVG, PREMUL_SUM).
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

std::vector<std::size_t> Numels(const std::vector<at::Tensor>& tensors, const Elems& e) {
  std::vector<std::size_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(Count(t, e));
  return out;
}

bool AllEqual(const std::vector<std::size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](std::size_t x) { return x == v.front(); });
}

// The tensors of a list laid end to end in one contiguous buffer.
at::Tensor Flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}
// Copies consecutive slices of `flat` (in torch elements) into `tensors`.
void Unflat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t off = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

#define COMMKIT_ISSUE(expr)                                \
  do {                                                     \
    auto issued_ = (expr);                                 \
    if (!issued_.ok()) return issued_.status();            \
    works.push_back(std::move(issued_).value());           \
  } while (false)

std::chrono::milliseconds OpTimeout(std::chrono::milliseconds requested) {
  return requested == c10d::kUnsetTimeout ? std::chrono::milliseconds(0) : requested;
}

int Root(int64_t root, int size, const char* what) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "commkit: ", what, ": root ", root, " is not a rank of this group of ",
                    size);
  return static_cast<int>(root);
}

}  // namespace

// --- the backend -------------------------------------------------------------------------------------

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

// --- operations --------------------------------------------------------------------------------------

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

c10::intrusive_ptr<c10d::Work> CommkitBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) {
  return allgather(outputs, inputs, opts);
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
