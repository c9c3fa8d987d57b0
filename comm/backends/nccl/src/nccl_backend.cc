// NcclBackend: the process-group Backend on top of NcclComm/NcclEngine/Watchdog.
#include "commkit/comm/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>

#include "commkit/comm/nccl/nccl_runtime.h"
#include "commkit/comm/nccl/nccl_types.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/nccl/watchdog.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/advisor.h"
#include "nccl_collectives.h"
#include "nccl_comm.h"
#include "nccl_engine.h"
#include "nccl_fingerprint.h"

namespace commkit::comm::nccl {
namespace {

constexpr std::string_view kUniqueIdKey = "nccl/unique_id";

std::mutex g_hook_mutex;
std::function<Status()> g_pre_init_hook;
bool g_pre_init_done = false;

// The default pre-init hook: the topology advisor's NCCL settings (COMMKIT_NCCL_ADVICE=off|log|apply,
// default log). It probes this machine (sysfs, NVML, CUDA), and with `apply` sets each variable the user
// has not set, logging it with its reason; `log` only says what it would set. A failed probe is a
// warning, never a failed backend.
Status ApplyTopologyAdvice() {
  COMMKIT_ASSIGN_OR_RETURN(auto choice, EnvChoice("COMMKIT_NCCL_ADVICE", {"off", "log", "apply"}));
  const std::string mode_name = choice.value_or("log");
  const topology::AdviceMode mode = mode_name == "off"   ? topology::AdviceMode::kOff
                                    : mode_name == "apply" ? topology::AdviceMode::kApply
                                                           : topology::AdviceMode::kLog;
  if (mode == topology::AdviceMode::kOff) return Status::Ok();
  topology::ProbeOptions probe;
  probe.nvml = probe.cuda = true;
  auto report = topology::ProbeTopology(*SystemView::Live(), probe);
  if (!report.ok()) {
    COMMKIT_LOG_WARN("NCCL backend: no topology advice (COMMKIT_NCCL_ADVICE=", mode_name,
                     "): probing this machine failed: ", report.status().ToString());
    return Status::Ok();
  }
  topology::ApplyAdvice(topology::Advise(*report, topology::AdvisorOptions::FromEnvironment()), mode);
  return Status::Ok();
}

// Runs the pre-init hook once per process (the options' hook wins over the process-wide one).
Status RunPreInitHook(const NcclBackendOptions& options) {
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  if (g_pre_init_done) return Status::Ok();
  auto hook = options.before_first_communicator ? options.before_first_communicator : g_pre_init_hook;
  if (hook) {
    COMMKIT_RETURN_IF_ERROR(hook().WithContext("NCCL backend: pre-init hook"));
  } else {
    COMMKIT_RETURN_IF_ERROR(ApplyTopologyAdvice());
  }
  g_pre_init_done = true;
  return Status::Ok();
}

int ToNccl(DataType t) { return NcclDataType(t); }
int ToNccl(ReduceKind k) { return NcclRedOp(k); }

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// Slot shared by a Work and the backend: filled at once, or at EndCoalescing for coalesced ops.
struct WorkSlot {
  std::mutex mutex;
  std::shared_ptr<NcclWorkState> state;
  Status error;      // the coalesced batch failed to issue
  bool filled = false;
};

class NcclWork : public Work {
 public:
  // `kind` unset: the work of a whole coalesced group.
  NcclWork(std::shared_ptr<WorkSlot> slot, std::uint64_t sequence, std::optional<CollectiveKind> kind)
      : slot_(std::move(slot)), sequence_(sequence), kind_(kind) {}

  bool Test() override {
    auto [state, error, filled] = Get();
    if (!filled) return false;
    if (!error.ok()) return true;
    return state == nullptr || state->Poll();
  }
  Status Wait(std::chrono::milliseconds) override { return WaitOn(nullptr, /*own_stream=*/true); }
  Status Synchronize(std::chrono::milliseconds timeout) override {
    auto [state, error, filled] = Get();
    if (!filled) return NotIssued();
    if (!error.ok() || state == nullptr) return error;
    return state->Synchronize(timeout);
  }
  Status status() const override {
    auto [state, error, filled] = Get();
    if (!error.ok() || state == nullptr) return error;
    return state->error();
  }
  std::chrono::nanoseconds Duration() const override {
    auto [state, error, filled] = Get();
    if (state == nullptr) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(static_cast<std::int64_t>(state->duration_seconds() * 1e9));
  }
  std::uint64_t Sequence() const override { return sequence_; }

  // Wait: the caller's stream (the op's own stream by default) waits on the GPU.
  Status WaitOn(cudaStream_t stream, bool own_stream) {
    auto [state, error, filled] = Get();
    if (!filled) return NotIssued();
    if (!error.ok() || state == nullptr) return error;
    return state->WaitOnStream(own_stream ? state->stream() : stream);
  }

 private:
  std::tuple<std::shared_ptr<NcclWorkState>, Status, bool> Get() const {
    std::lock_guard<std::mutex> lock(slot_->mutex);
    return {slot_->state, slot_->error, slot_->filled};
  }
  Status NotIssued() const {
    return Status::InvalidArgument(
        StrCat(kind_ ? StrCat(ToString(*kind_), " #", sequence_) : std::string("coalesced group"),
               ": waited on a coalesced op before NcclEndCoalescing()"));
  }
  std::shared_ptr<WorkSlot> slot_;
  std::uint64_t sequence_;
  std::optional<CollectiveKind> kind_;
};

class NcclBackend : public Backend {
 public:
  NcclBackend(BackendContext context, NcclBackendOptions options, std::shared_ptr<NcclEngine> engine)
      : context_(std::move(context)), options_(std::move(options)), engine_(std::move(engine)) {
    WatchdogOptions wo;
    wo.name = StrCat("nccl-watchdog[", context_.group_name, "]");
    wo.poll_interval = options_.watchdog_poll;
    wo.abort_deadline = options_.abort_deadline;
    watchdog_ = std::make_unique<Watchdog>(wo);
    watchdog_->Watch(engine_);
  }

  ~NcclBackend() override {
    watchdog_.reset();  // stop polling before the communicator goes away
    if (scratch_ != nullptr) {
      DeviceGuard guard(engine_->comm().device());
      cudaFree(scratch_);
    }
  }

  std::string_view Name() const override { return "nccl"; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    return NcclSupports(kind, dtype, memory, op);
  }

  // A 16-byte MAX all-reduce of the fingerprint in the collective's own group (nccl_fingerprint.h).
  bool ChecksMismatchOnCompletion() const override { return true; }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    // Formatted only where an error needs it: this runs once per collective.
    auto what = [&] {
      return StrCat(ToString(a.kind), " #", a.sequence, " on group '", context_.group_name, "' (rank ",
                    context_.rank, "/", context_.size, ")");
    };
    if (!Supports(a.kind, a.dtype, a.memory, a.op.kind)) {
      return Status::NotSupported(StrCat(what(), ": the NCCL backend cannot do ", ToString(a.kind), " on ",
                                         ToString(a.memory), " ", ToString(a.dtype), " with ",
                                         a.op.ToString(), " (NCCL needs device buffers and has no "
                                         "bitwise reductions)"));
    }
    int dtype = ToNccl(a.dtype);
    int op = ToNccl(a.op.kind);
    std::vector<NcclCleanup> cleanups;
    if (IsReduction(a.kind) && a.op.kind == ReduceKind::kPreMulSum) {
      COMMKIT_ASSIGN_OR_RETURN(PreMulSumOp pm, CreatePreMulSum(engine_->comm().raw(), a.op.scalar, dtype, what()));
      op = pm.op;
      cleanups.push_back(std::move(pm.cleanup));
    }
    auto plan = Plan(a, dtype, op);
    if (!plan.ok()) {
      for (auto& cleanup : cleanups) cleanup(engine_->comm().raw());  // destroy a PreMulSum op
      return plan.status().WithContext(what());
    }
    std::vector<NcclCall> calls = std::move(*plan);
    // The fingerprint check goes first into the collective's own group: one launch, no host
    // synchronisation; its verdict is read when the work completes (NcclWorkState::Poll).
    std::shared_ptr<FingerprintCheck> check;
    if (a.check_fingerprint) {
      if (fingerprints_ == nullptr) fingerprints_ = std::make_shared<FingerprintSlots>(engine_->comm().device());
      auto acquired = fingerprints_->Acquire(a.fingerprint);
      if (!acquired.ok()) {
        for (auto& cleanup : cleanups) cleanup(engine_->comm().raw());
        return acquired.status().WithContext(what());
      }
      check = std::move(*acquired);
      calls.insert(calls.begin(), check->Call());
    }
    cudaStream_t stream = AsStream(a.stream != nullptr ? a.stream : options_.default_stream);
    auto slot = std::make_shared<WorkSlot>();
    bool was_coalescing = engine_->coalescing();
    auto issued = engine_->Enqueue(StrCat(ToString(a.kind), " #", a.sequence), stream, std::move(calls), std::move(cleanups), a.timeout, std::move(check));
    if (!issued.ok()) return issued.status();
    if (was_coalescing && *issued == nullptr) {
      coalesced_slots_.push_back(slot);
    } else {
      slot->state = *issued;
      slot->filled = true;
    }
    return std::unique_ptr<Work>(std::make_unique<NcclWork>(slot, a.sequence, a.kind));
  }

  Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int key) override {
    NcclCommConfig cfg = CommConfig(context.group_name);
    auto deadline = Clock::now() + InitTimeout(context);
    COMMKIT_ASSIGN_OR_RETURN(auto child, engine_->comm().Split(color, key, cfg, deadline));
    if (child == nullptr) return std::unique_ptr<Backend>();
    if (child->size() != context.size || child->rank() != context.rank) {
      return Status::Internal(StrCat("NCCL split of group '", context_.group_name, "': NCCL placed this rank at ",
                                     child->rank(), "/", child->size(), " but the process group expects ",
                                     context.rank, "/", context.size));
    }
    NcclEngineOptions eo;
    eo.timeout = context.timeout;
    auto engine = std::make_shared<NcclEngine>(std::move(child), eo);
    return std::unique_ptr<Backend>(std::make_unique<NcclBackend>(context, options_, std::move(engine)));
  }

  void Abort(std::string_view reason) override {
    Status error = Status::Aborted(StrCat("group '", context_.group_name, "' aborted: ", reason));
    watchdog_->Unwatch(engine_.get());
    // Bounded like the watchdog's abort: a hung ncclCommAbort must not hang the caller.
    auto engine = engine_;
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([engine, done] {
      engine->Abort();
      done->store(true);
    }).detach();
    auto deadline = Clock::now() + options_.abort_deadline;
    while (!done->load() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!done->load()) {
      error = Status::Aborted(StrCat(error.message(), "; ncclCommAbort did not finish within ",
                                     options_.abort_deadline.count(), " ms (the process should exit)"));
    }
    engine_->FailPending(error);
  }

  Status StartCoalescing() {
    COMMKIT_RETURN_IF_ERROR(engine_->StartCoalescing());
    coalesced_slots_.clear();
    return Status::Ok();
  }

  Result<std::unique_ptr<Work>> EndCoalescing() {
    auto issued = engine_->EndCoalescing(std::chrono::milliseconds(0));
    std::vector<std::shared_ptr<WorkSlot>> slots;
    slots.swap(coalesced_slots_);
    for (auto& slot : slots) {
      std::lock_guard<std::mutex> lock(slot->mutex);
      slot->filled = true;
      if (issued.ok()) {
        slot->state = *issued;
      } else {
        slot->error = issued.status();
      }
    }
    if (!issued.ok()) return issued.status();
    auto slot = std::make_shared<WorkSlot>();
    slot->state = *issued;
    slot->filled = true;
    return std::unique_ptr<Work>(std::make_unique<NcclWork>(slot, 0, std::nullopt));
  }

  NcclCommConfig CommConfig(const std::string& group_name) const {
    NcclCommConfig cfg;
    cfg.blocking = false;
    cfg.name = group_name;
    cfg.net_name = options_.net_name;
    cfg.min_ctas = options_.min_ctas;
    cfg.max_ctas = options_.max_ctas;
    return cfg;
  }

  std::chrono::milliseconds InitTimeout(const BackendContext& context) const {
    return options_.init_timeout.count() > 0 ? options_.init_timeout : context.timeout;
  }

 private:
  // The NCCL calls for one collective.
  Result<std::vector<NcclCall>> Plan(const CollectiveArgs& a, int dtype, int op) {
    const int rank = context_.rank;
    const int size = context_.size;
    const std::size_t elem = SizeOf(a.dtype);
    const void* send = a.send != nullptr ? a.send : a.recv;
    switch (a.kind) {
      case CollectiveKind::kAllreduce: return std::vector<NcclCall>{AllReduceCall(send, a.recv, a.count, dtype, op)};
      case CollectiveKind::kBroadcast: return std::vector<NcclCall>{BroadcastCall(a.recv, a.recv, a.count, dtype, a.root)};
      case CollectiveKind::kReduce: return std::vector<NcclCall>{ReduceCall(a.send, a.recv, a.count, dtype, op, a.root)};
      case CollectiveKind::kAllgather: return std::vector<NcclCall>{AllGatherCall(send, a.recv, a.count, dtype)};
      case CollectiveKind::kReduceScatter:
        return std::vector<NcclCall>{ReduceScatterCall(a.send, a.recv, a.count, dtype, op)};
      case CollectiveKind::kAlltoall: return AllToAllCalls(a.send, a.recv, a.count, dtype, size);
      case CollectiveKind::kGather: return GatherCalls(a.send, a.recv, a.count, dtype, a.root, rank, size);
      case CollectiveKind::kScatter: return ScatterCalls(a.send, a.recv, a.count, dtype, a.root, rank, size);
      case CollectiveKind::kSend: return std::vector<NcclCall>{SendCall(a.send, a.count, dtype, a.peer)};
      case CollectiveKind::kRecv: return std::vector<NcclCall>{RecvCall(a.recv, a.count, dtype, a.peer)};
      case CollectiveKind::kAllgatherv: {
        std::vector<std::size_t> displs = Offsets(a.counts);
        std::size_t mine = a.counts.size() == static_cast<std::size_t>(size) ? a.counts[rank] : 0;
        return AllGatherVCalls(a.send, mine, a.recv, a.counts, displs, dtype, rank, size);
      }
      case CollectiveKind::kReduceScatterV: {
        // One ncclReduce per block, rooted at the block's owner, in one group.
        if (a.counts.size() != static_cast<std::size_t>(size)) {
          return Status::InvalidArgument(StrCat("reduce_scatter_v: counts has ", a.counts.size(),
                                                " entries for ", size, " ranks"));
        }
        std::vector<std::size_t> displs = Offsets(a.counts);
        std::vector<NcclCall> calls;
        for (int p = 0; p < size; ++p) {
          const char* block = static_cast<const char*>(a.send) + displs[p] * elem;
          calls.push_back(ReduceCall(block, a.recv, a.counts[p], dtype, op, p));
        }
        return calls;
      }
      case CollectiveKind::kAlltoallv:
        return AllToAllVCalls(a.send, a.counts, Offsets(a.counts), a.recv, a.recv_counts,
                              Offsets(a.recv_counts), dtype, size);
      case CollectiveKind::kBarrier: {
        // NCCL has no barrier: a one-element allreduce on a private device scratch buffer.
        if (scratch_ == nullptr) {
          DeviceGuard guard(engine_->comm().device());
          COMMKIT_RETURN_IF_ERROR(guard.status());
          cudaError_t err = cudaMalloc(&scratch_, sizeof(float));
          if (err != cudaSuccess) {
            scratch_ = nullptr;
            (void)cudaGetLastError();
            return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err), "barrier scratch cudaMalloc");
          }
          cudaMemset(scratch_, 0, sizeof(float));
        }
        return std::vector<NcclCall>{AllReduceCall(scratch_, scratch_, 1, ncclFloat32, ncclSum)};
      }
    }
    return Status::NotSupported(StrCat("NCCL backend: unknown collective ", static_cast<int>(a.kind)));
  }

  static std::vector<std::size_t> Offsets(const std::vector<std::size_t>& counts) {
    std::vector<std::size_t> displs(counts.size(), 0);
    if (!counts.empty()) std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
    return displs;
  }

  BackendContext context_;
  NcclBackendOptions options_;
  std::shared_ptr<NcclEngine> engine_;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::shared_ptr<WorkSlot>> coalesced_slots_;
  std::shared_ptr<FingerprintSlots> fingerprints_;  // created on the first checked collective
  void* scratch_ = nullptr;
};

Result<int> PickDevice(const BackendContext& context, const NcclBackendOptions& options, int device_count) {
  // Explicit choices first (options, then the context), else the node-local rank, else the rank.
  int explicit_device = options.device >= 0 ? options.device : context.device;
  if (explicit_device >= 0) {
    if (explicit_device >= device_count) {
      return Status::InvalidArgument(StrCat("NCCL backend: device ", explicit_device, " requested but only ",
                                            device_count, " visible (CUDA_VISIBLE_DEVICES?)"));
    }
    return explicit_device;
  }
  if (context.local_rank >= 0) return context.local_rank % device_count;
  COMMKIT_ASSIGN_OR_RETURN(auto local_rank, EnvInt("LOCAL_RANK", 0, 1 << 20));
  int base = local_rank ? static_cast<int>(*local_rank) : context.rank;
  return base % device_count;
}

}  // namespace

bool NcclSupports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) {
  if (memory != MemoryKind::kDevice) return false;
  if (ToNccl(dtype) < 0) return false;
  if (IsReduction(kind)) {
    switch (op) {
      case ReduceKind::kSum:
      case ReduceKind::kProd:
      case ReduceKind::kMin:
      case ReduceKind::kMax:
      case ReduceKind::kAvg:
      case ReduceKind::kPreMulSum: return true;
      case ReduceKind::kBand:
      case ReduceKind::kBor:
      case ReduceKind::kBxor: return false;
    }
    return false;
  }
  return true;
}

void SetNcclPreInitHook(std::function<Status()> hook) {
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_pre_init_hook = std::move(hook);
}

Result<std::unique_ptr<Backend>> CreateNcclBackend(const BackendContext& context, const NcclBackendOptions& options) {
  std::string who = StrCat("NCCL backend for group '", context.group_name, "' (rank ", context.rank, "/",
                           context.size, ")");
  COMMKIT_ASSIGN_OR_RETURN(NcclRuntimeInfo info, ProbeNcclRuntime());
  if (context.store == nullptr) return Status::InvalidArgument(StrCat(who, ": no store to exchange the NCCL unique id"));
  if (context.size < 1 || context.rank < 0 || context.rank >= context.size) {
    return Status::InvalidArgument(StrCat(who, ": invalid rank/size"));
  }
  COMMKIT_ASSIGN_OR_RETURN(int device, PickDevice(context, options, info.device_count));
  COMMKIT_RETURN_IF_ERROR(RunPreInitHook(options));
  auto timeout = options.init_timeout.count() > 0 ? options.init_timeout : context.timeout;
  auto deadline = Clock::now() + timeout;

  // Each collective creation on the same store is one generation with its own key, so recreating a
  // backend (after an abort) never reads a stale id: every rank adds 1, and the counter value tells
  // the generation.
  auto ticket = context.store->Add(StrCat(kUniqueIdKey, "/count"), 1);
  if (!ticket.ok()) return ticket.status().WithContext(StrCat(who, ": NCCL unique-id generation"));
  const std::string key = StrCat(kUniqueIdKey, "/", (*ticket - 1) / context.size);
  NcclUniqueIdBytes id;
  if (context.rank == 0) {
    COMMKIT_ASSIGN_OR_RETURN(id, NcclComm::NewUniqueId());
    COMMKIT_RETURN_IF_ERROR(context.store->Set(key, std::string_view(id.data(), id.size()))
                                .WithContext(StrCat(who, ": publishing the NCCL unique id")));
  } else {
    auto value = context.store->Get(key, timeout);
    if (!value.ok()) {
      return value.status().WithContext(StrCat(who, ": waiting for rank 0's NCCL unique id (is rank 0 up "
                                                    "and using the nccl backend?)"));
    }
    if (value->size() != id.size()) {
      return Status::DataLoss(StrCat(who, ": NCCL unique id in the store has ", value->size(), " bytes, expected ",
                                     id.size(), " (another program wrote '", key, "'?)"));
    }
    std::copy(value->begin(), value->end(), id.begin());
  }

  NcclCommConfig cfg;
  cfg.blocking = false;
  cfg.name = context.group_name;
  cfg.net_name = options.net_name;
  cfg.min_ctas = options.min_ctas;
  cfg.max_ctas = options.max_ctas;
  COMMKIT_ASSIGN_OR_RETURN(auto comm, NcclComm::InitRank(id, context.size, context.rank, device, cfg, deadline,
                                                         options.abort_deadline));
  COMMKIT_LOG_INFO(who, ": communicator ready on cuda:", device, " (", info.ToString(), ")");
  NcclEngineOptions eo;
  eo.timeout = context.timeout;
  auto engine = std::make_shared<NcclEngine>(std::move(comm), eo);
  return std::unique_ptr<Backend>(std::make_unique<NcclBackend>(context, options, std::move(engine)));
}

BackendInfo NcclBackendInfo(const NcclBackendOptions& options) {
  BackendInfo info;
  info.name = "nccl";
  info.memory = MemoryKind::kDevice;
  auto probe = ProbeNcclRuntime();
  info.available = probe.ok();
  info.reason = probe.ok() ? probe->ToString() : probe.status().message();
  info.create = [options](const BackendContext& context) { return CreateNcclBackend(context, options); };
  return info;
}

Status NcclStartCoalescing(Backend& backend) {
  auto* nccl = dynamic_cast<NcclBackend*>(&backend);
  if (nccl == nullptr) return Status::InvalidArgument(StrCat("NcclStartCoalescing: backend '", backend.Name(), "' is not NCCL"));
  return nccl->StartCoalescing();
}

Result<std::unique_ptr<Work>> NcclEndCoalescing(Backend& backend) {
  auto* nccl = dynamic_cast<NcclBackend*>(&backend);
  if (nccl == nullptr) return Status::InvalidArgument(StrCat("NcclEndCoalescing: backend '", backend.Name(), "' is not NCCL"));
  return nccl->EndCoalescing();
}

Status NcclWaitOnStream(Work& work, void* stream) {
  auto* nccl = dynamic_cast<NcclWork*>(&work);
  if (nccl == nullptr) return Status::InvalidArgument("NcclWaitOnStream: not a Work of the NCCL backend");
  return nccl->WaitOn(AsStream(stream), /*own_stream=*/false);
}

}  // namespace commkit::comm::nccl

// Found by Registry::Default() with dlsym when this library is part of the program (registry.cc).
extern "C" __attribute__((visibility("default"))) void commkit_register_nccl_backend(commkit::Registry* registry) {
  if (registry != nullptr) registry->Register(commkit::comm::nccl::NcclBackendInfo());
}
