#include "commkit/comm/process_group.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "commkit/comm/flight_recorder.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "completed_work.h"
#include "executor.h"
#include "flight_clock.h"
#include "health.h"
#include "mismatch.h"
#include "validate.h"

namespace commkit {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class ProcessGroup::Impl {
 public:
  Impl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options, std::unique_ptr<Backend> backend)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        backend_(std::move(backend)),
        health_(store_, rank_, size_, Who()),
        mismatch_(store_, *backend_, health_, rank_, size_, Who()),
        check_on_completion_(options_.check_mismatch && size_ > 1 && !backend_->ChecksMismatch() &&
                             backend_->ChecksMismatchOnCompletion()) {
    inline_bytes_ = static_cast<std::size_t>(EnvIntOr("COMMKIT_INLINE_BYTES", 256 << 10, 0, std::int64_t{1} << 40).value_or(256 << 10));
    flight_ = FlightRecorder::FromEnvironment({rank_, size_, options_.name, std::string(backend_->Name())});
    gate_->impl = this;
    worker_ = std::thread([this] { WorkerLoop(); });
  }

  ~Impl() {
    {
      // A caller helping (running its own operation) finishes first; later Waits find no group.
      std::unique_lock<std::shared_mutex> gate(gate_->mu);
      gate_->impl = nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    // Finish (or time out) queued sends and receives first; a Work kept past the group holds only a
    // stopped executor.
    if (send_exec_) send_exec_->Shutdown();
    if (recv_exec_) recv_exec_->Shutdown();
    send_exec_.reset();
    recv_exec_.reset();
    worker_.join();
    health_.Stop();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  Backend& backend() { return *backend_; }
  const ProcessGroupOptions& options() const { return options_; }
  const std::shared_ptr<Store>& store() const { return store_; }

  std::string Who() const { return StrCat(options_.name, " (rank ", rank_, "/", size_, ")"); }

  // InvalidArgument or NotSupported before any communication. (Who() formats a string: only on the
  // error path.)
  Status CheckArgs(const CollectiveArgs& args) const {
    if (Status invalid = ValidateArgs(args, rank_, size_); !invalid.ok()) return invalid.WithContext(Who());
    if (!backend_->Supports(args.kind, args.dtype, args.memory, args.op.kind))
      return Status::NotSupported(StrCat(Who(), ": backend ", backend_->Name(), " does not support ", ToString(args.kind),
                                         " of ", ToString(args.dtype), IsReduction(args.kind) ? StrCat(" with ", args.op.ToString()) : "",
                                         " on ", ToString(args.memory), " memory"));
    return Status::Ok();
  }

  // `args` is the caller's temporary: filled in here, not copied (the hot path).
  Result<std::unique_ptr<Work>> Submit(CollectiveArgs&& args, const OpOptions& opts) {
    args.memory = opts.memory.value_or(options_.memory);
    args.stream = opts.stream;
    args.timeout = opts.timeout.count() > 0 ? opts.timeout : options_.timeout;
    std::shared_ptr<WorkState> state;
    std::uint64_t seq;
    bool run_here = false;
    const bool p2p = args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The same shape as the last valid call (a training loop's usual case) was validated already.
      std::uint64_t shape_hash;
      if (!shapes_.Lookup(args, &shape_hash)) {
        COMMKIT_RETURN_IF_ERROR(CheckArgs(args));
        shape_hash = ShapeHash(args);
        shapes_.Store(args, shape_hash);
      }
      // Collectives are numbered in one sequence that every rank shares; point-to-point operations,
      // which only two ranks see, in their own.
      seq = p2p ? ++next_p2p_seq_ : ++next_seq_;
      args.sequence = seq;
      args.fingerprint = FingerprintOf(shape_hash, seq);
      args.check_fingerprint = check_on_completion_ && !p2p;
      // The group times every call (flight recorder, worker state) and stamps the Work it returns,
      // except the backend's own Work that completes later (the fingerprint check's).
      args.timed_by_caller = !args.check_fingerprint;
      // Small collectives with nothing ahead of them run on the caller's thread: the hand-off to the
      // worker (two context switches) would cost more than the operation. Larger ones stay
      // asynchronous so callers overlap them with computation. Order is kept: nothing is queued or
      // running, and anything submitted meanwhile waits for `busy_`.
      if (p2p && backend_->ConcurrentPointToPoint()) {
        flight_->Scheduled(args);
        state = std::make_shared<WorkState>();
        // Sends and receives progress on their own threads, in order per direction, independently of
        // the collectives and of each other: both peers may send first.
        if (!send_exec_) send_exec_ = std::make_shared<SerialExecutor>();
        if (!recv_exec_) recv_exec_ = std::make_shared<SerialExecutor>();
        // Shared: a Work may outlive the group (the group shuts its executors down: see Shutdown).
        std::shared_ptr<SerialExecutor> mine = args.kind == CollectiveKind::kSend ? send_exec_ : recv_exec_;
        std::shared_ptr<SerialExecutor> other = args.kind == CollectiveKind::kSend ? recv_exec_ : send_exec_;
        auto task = mine->Post([this, args, state] { Execute(args, *state); });
        // A waiter prepared to wait as long as the operation's own timeout runs it (and queued ones
        // ahead of it) itself; a shorter wait must not block in the operation. The other direction
        // must progress meanwhile: a receive, or a send that may wait for the peer, wakes the other
        // direction's thread first; a send the backend calls eager (EagerPointToPointBytes) normally
        // completes at once, so the caller goes on to wait for (and run) its receive itself. Should
        // the eager send block after all, the receive thread's own look (at most 10 ms) starts it.
        const milliseconds op_timeout = args.timeout;
        const bool small = args.kind == CollectiveKind::kSend && PayloadBytes(args) <= backend_->EagerPointToPointBytes();
        return std::unique_ptr<Work>(
            new HostWork(std::move(state), seq, [mine, other, task, op_timeout, small](milliseconds t) {
              if (t < op_timeout) {
                other->Nudge();
                mine->Nudge();
                return;
              }
              if (!small) other->Nudge();
              mine->Help(task);
            }));
      }
      // A collective may block until peers arrive; queued sends and receives must not wait for it.
      if (send_exec_) send_exec_->Nudge();
      if (recv_exec_) recv_exec_->Nudge();
      // Device work (NCCL) only enqueues on a stream, whatever its size: always inline.
      if (!p2p && queue_.empty() && !busy_.load(std::memory_order_acquire) &&
          (PayloadBytes(args) <= inline_bytes_ || args.memory == MemoryKind::kDevice)) {
        busy_.store(true, std::memory_order_relaxed);
        run_here = true;
      } else {
        flight_->Scheduled(args);
        state = std::make_shared<WorkState>();
        queue_.push_back(Queued{[this, args, state] { Execute(args, *state); }, state.get()});
        queued_.fetch_add(1);
      }
    }
    if (run_here) {
      // Done when it returns: a completed Work, without the shared state a worker would signal, timed
      // by the flight recorder's clock reads (no clock read of its own).
      std::unique_ptr<Work> then, done;
      std::int64_t ticks = 0;
      Status s = Enter(args, /*begin=*/true, &then, &done, &ticks);
      // Released without the lock (the hot path takes it once). The store and the load are
      // sequentially consistent, as is queued_'s increment: either this thread sees what was queued
      // meanwhile and wakes the worker, or the increment came later, and the worker, woken by the
      // submitter that queued, reads busy_ false under the lock.
      busy_.store(false);
      if (queued_.load() > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        cv_.notify_all();
      }
      if (then) return then;
      const std::chrono::nanoseconds duration(flight_clock::TicksToNanos(ticks));
      // The backend's own completed Work, re-stamped, when it is one: no second allocation.
      if (auto reused = ReuseCompletedWork(done, seq, duration)) return reused;
      return CompletedWork(std::move(s), seq, duration);
    }
    cv_.notify_all();
    // A caller that waits for the whole operation right away (a blocking collective) runs it itself
    // when the worker has not started it: the two thread hand-offs cost more than a large call's
    // copies here (a wake-up of an idle virtual CPU takes tens of microseconds). Shorter waits and
    // Test() leave it to the worker.
    const milliseconds op_timeout = args.timeout;
    return std::unique_ptr<Work>(new HostWork(state, seq, [gate = gate_, state, op_timeout](milliseconds t) {
      if (t < op_timeout) return;
      std::shared_lock<std::shared_mutex> lock(gate->mu);
      if (gate->impl != nullptr) gate->impl->RunIfNext(*state);
    }));
  }

 private:
  static std::size_t PayloadBytes(const CollectiveArgs& a) {
    std::size_t elems = a.count;
    for (std::size_t c : a.counts) elems += c;
    for (std::size_t c : a.recv_counts) elems += c;
    return elems * SizeOf(a.dtype);
  }

  void Execute(const CollectiveArgs& args, WorkState& state) {
    {
      std::lock_guard<std::mutex> lock(state.mu);
      state.start = Clock::now();
    }
    std::unique_ptr<Work> then;
    Status s = Enter(args, /*begin=*/false, &then, nullptr, nullptr);
    {
      std::lock_guard<std::mutex> lock(state.mu);
      state.status = s;
      state.then = std::move(then);
      state.end = Clock::now();
      state.done = true;
    }
    state.cv.notify_all();
  }

  // Runs one operation on this thread (a worker's or an inline caller's); collectives first record
  // that this rank entered them, for the progress heartbeat. `begin`: the operation was not recorded
  // as scheduled (it runs right where it was submitted). `then` receives the Work of the part that
  // completes later, when there is one (a collective whose fingerprint the backend checks); `done`,
  // when given, the backend's completed Work of a successful operation otherwise; `ticks`, when
  // given, the operation's duration in flight recorder ticks.
  Status Enter(const CollectiveArgs& args, bool begin, std::unique_ptr<Work>* then, std::unique_ptr<Work>* done,
               std::int64_t* ticks) {
    if (args.kind != CollectiveKind::kSend && args.kind != CollectiveKind::kRecv) health_.Entered(args.sequence);
    const std::int64_t flight_start = begin ? flight_->Begin(args) : flight_->Started(args);
    Status s = RunChecked(args, then, done);
    const std::int64_t flight_end = flight_->Finished(args, flight_start, s);
    if (ticks != nullptr) *ticks = flight_end - flight_start;
    return s;
  }

  Status RunChecked(const CollectiveArgs& args, std::unique_ptr<Work>* then, std::unique_ptr<Work>* done) {
    // After a failure that broke the group, everything queued behind it fails at once with that first
    // error: no backend call, no diagnosis (a survivor exits right after reporting the failure).
    if (failed_flag_.load(std::memory_order_acquire)) return Unusable(args);
    // Point-to-point operations involve two ranks only: nothing group-wide to compare.
    bool p2p = args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv;
    const bool backend_checks = backend_->ChecksMismatch() || args.check_fingerprint;
    if (options_.check_mismatch && size_ > 1 && !p2p && !backend_checks) {
      Status check = mismatch_.Check(args);
      if (!check.ok()) return Failed(args, std::move(check));
    }
    auto work = backend_->Run(args);
    Status s = work.ok() ? (*work)->Wait(args.timeout + std::chrono::seconds(5)) : work.status();
    // Checked on the communicator: the verdict comes with the collective's completion (no host
    // synchronisation here), so the caller gets the backend's Work behind one that reports the diff.
    // Device work (NCCL): Wait() only ordered the stream, so the backend's Work is what completes
    // later and what Synchronize() must block on.
    if (s.ok() && args.check_fingerprint) {
      *then = mismatch_.Deferred(args, std::move(*work));
    } else if (s.ok() && args.memory == MemoryKind::kDevice) {
      *then = std::move(*work);
    } else if (s.ok() && done != nullptr) {
      *done = std::move(*work);
    }
    if (s.ok()) return s;
    if (backend_checks && !p2p && s.code() == StatusCode::kMismatch) return mismatch_.Report(args);
    return Failed(args, health_.Diagnose(args, s));
  }

  // Records the first failure of a collective that leaves the group unusable: ranks may be stopped
  // mid-exchange. Mismatches (detected before any data moved) and local argument errors do not.
  Status Failed(const CollectiveArgs& args, Status s) {
    const bool p2p = args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv;
    const StatusCode c = s.code();
    if (p2p || c == StatusCode::kMismatch || c == StatusCode::kInvalidArgument || c == StatusCode::kNotSupported)
      return s;
    std::lock_guard<std::mutex> lock(failed_mu_);
    if (failed_.ok()) {
      failed_ = s;
      failed_flag_.store(true, std::memory_order_release);
    }
    return s;
  }

  Status Unusable(const CollectiveArgs& args) {
    std::lock_guard<std::mutex> lock(failed_mu_);
    return Status::Aborted(StrCat(Who(), ": ", ToString(args.kind), " #", args.sequence,
                                  " not run: the group is unusable after an earlier failure; recreate the process "
                                  "group (first error: ", failed_.message(), ")"));
  }

  // Runs the operation of `state` on this thread when it is next in the queue and nothing runs.
  void RunIfNext(const WorkState& state) {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (busy_ || queue_.empty() || queue_.front().state != &state) return;
      task = TakeNextLocked();
    }
    RunTaken(task);
  }

  void WorkerLoop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
        if (queue_.empty()) return;
        task = TakeNextLocked();
      }
      RunTaken(task);
    }
  }

  // With mu_ held and the queue not empty: takes its first operation; the group is busy until RunTaken.
  std::function<void()> TakeNextLocked() {
    std::function<void()> task = std::move(queue_.front().run);
    queue_.pop_front();
    queued_.fetch_sub(1);
    busy_ = true;
    return task;
  }

  // Runs an operation TakeNextLocked took, then lets the next one start (on the worker or a waiting caller).
  void RunTaken(const std::function<void()>& task) {
    task();
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }

  std::shared_ptr<Store> store_;
  int rank_, size_;
  ProcessGroupOptions options_;
  std::unique_ptr<Backend> backend_;
  std::mutex mu_;
  std::condition_variable cv_;          // the worker: work queued, or `busy_` released
  struct Queued {
    std::function<void()> run;
    const WorkState* state;  // which Work's operation (RunIfNext)
  };
  std::deque<Queued> queue_;
  // Lets a Work that may outlive the group run its queued operation while the group exists.
  struct HelpGate {
    std::shared_mutex mu;
    Impl* impl = nullptr;
  };
  std::shared_ptr<HelpGate> gate_ = std::make_shared<HelpGate>();
  bool stopping_ = false;
  // An operation is running (on the worker or inline on a caller's thread). Set under mu_; an inline
  // caller clears it without (see Submit).
  std::atomic<bool> busy_{false};
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without mu_
  ShapeCache shapes_;  // guarded by mu_
  std::size_t inline_bytes_ = 256 << 10;
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_p2p_seq_ = 0;
  Health health_;          // progress heartbeat and failure diagnosis
  MismatchCheck mismatch_;  // used by the thread running collectives only
  const bool check_on_completion_;  // the backend checks fingerprints with each collective
  std::atomic<bool> failed_flag_{false};  // failed_ is set
  std::mutex failed_mu_;
  Status failed_;  // the first failure that left the group unusable
  std::thread worker_;
  std::shared_ptr<SerialExecutor> send_exec_, recv_exec_;  // created on first use; guarded by mu_
  std::shared_ptr<FlightRecorder> flight_;  // the last operations, for dumps; and the group's metrics
  friend class ProcessGroup;
  int splits_ = 0;
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(std::shared_ptr<Store> store, int rank, int size,
                                                           const ProcessGroupOptions& options) {
  if (!store) return Status::InvalidArgument("ProcessGroup::Create: store is null");
  if (size < 1 || rank < 0 || rank >= size)
    return Status::InvalidArgument(StrCat("ProcessGroup::Create: rank ", rank, " is not in [0, ", size, ")"));
  ProcessGroupOptions o = options;
  COMMKIT_ASSIGN_OR_RETURN(o.timeout, EnvDurationOr("COMMKIT_TIMEOUT", o.timeout));
  COMMKIT_ASSIGN_OR_RETURN(o.check_mismatch, EnvBoolOr("COMMKIT_CHECK_MISMATCH", o.check_mismatch));
  COMMKIT_RETURN_IF_ERROR(FlightRecorder::CheckEnvironment());
  auto pg_store = std::make_shared<PrefixStore>(StrCat("pg/", o.name), std::move(store));
  BackendContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  ctx.store = std::make_shared<PrefixStore>("backend", pg_store);
  ctx.group_name = o.name;
  ctx.timeout = o.timeout;
  ctx.local_rank = o.local_rank;
  ctx.device = o.device;
  auto backend = Registry::Default().Create(o.backend, o.memory, ctx);
  if (!backend.ok()) return backend.status().WithContext(StrCat("rank ", rank, "/", size, ": process group ", o.name));
  // A backend that takes only device buffers makes device memory the group's default.
  if (!(*backend)->Supports(CollectiveKind::kAllreduce, DataType::kFloat32, MemoryKind::kHost, ReduceKind::kSum) &&
      (*backend)->Supports(CollectiveKind::kAllreduce, DataType::kFloat32, MemoryKind::kDevice, ReduceKind::kSum))
    o.memory = MemoryKind::kDevice;
  COMMKIT_LOG_INFO("process group ", o.name, ": rank ", rank, "/", size, " on backend ", (*backend)->Name());
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(std::make_unique<Impl>(pg_store, rank, size, o, std::move(backend).value())));
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::FromEnvironment(const ProcessGroupOptions& options) {
  COMMKIT_ASSIGN_OR_RETURN(Rendezvous rdzv, RendezvousFromEnvironment());
  ProcessGroupOptions o = options;
  if (o.local_rank < 0) o.local_rank = rdzv.info.local_rank;
  return Create(rdzv.store, rdzv.info.rank, rdzv.info.world_size, o);
}

int ProcessGroup::rank() const { return impl_->rank(); }
int ProcessGroup::size() const { return impl_->size(); }
std::string_view ProcessGroup::backend_name() const { return impl_->backend().Name(); }
const std::string& ProcessGroup::name() const { return impl_->name(); }
MemoryKind ProcessGroup::memory() const { return impl_->options().memory; }
bool ProcessGroup::Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceOp op) const {
  return impl_->backend().Supports(kind, dtype, memory, op.kind);
}
Result<std::filesystem::path> ProcessGroup::DumpFlightRecord(std::string_view reason, const std::filesystem::path& dir) const {
  return impl_->flight_->Dump(reason, dir);
}

namespace {
CollectiveArgs Args(CollectiveKind kind, const void* send, void* recv, std::size_t count, DataType dtype) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  return a;
}
}  // namespace

Result<ProcessGroup::WorkPtr> ProcessGroup::Allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                                                      ReduceOp op, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kAllreduce, send, recv, count, dtype);
  a.op = op;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Broadcast(void* buffer, std::size_t count, DataType dtype, int root,
                                                      const OpOptions& opts) {
  auto a = Args(CollectiveKind::kBroadcast, buffer, buffer, count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                                                   ReduceOp op, int root, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kReduce, send, recv, count, dtype);
  a.op = op;
  a.root = root;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Allgather(const void* send, void* recv, std::size_t count, DataType dtype,
                                                      const OpOptions& opts) {
  return impl_->Submit(Args(CollectiveKind::kAllgather, send, recv, count, dtype), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Allgatherv(const void* send, void* recv,
                                                       const std::vector<std::size_t>& counts, DataType dtype,
                                                       const OpOptions& opts) {
  auto a = Args(CollectiveKind::kAllgatherv, send, recv, 0, dtype);
  a.counts = counts;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::ReduceScatter(const void* send, void* recv, std::size_t count,
                                                          DataType dtype, ReduceOp op, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kReduceScatter, send, recv, count, dtype);
  a.op = op;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::ReduceScatterV(const void* send, void* recv,
                                                           const std::vector<std::size_t>& counts, DataType dtype,
                                                           ReduceOp op, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kReduceScatterV, send, recv, 0, dtype);
  a.counts = counts;
  a.op = op;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Alltoall(const void* send, void* recv, std::size_t count, DataType dtype,
                                                     const OpOptions& opts) {
  return impl_->Submit(Args(CollectiveKind::kAlltoall, send, recv, count, dtype), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Alltoallv(const void* send, const std::vector<std::size_t>& send_counts,
                                                      void* recv, const std::vector<std::size_t>& recv_counts,
                                                      DataType dtype, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kAlltoallv, send, recv, 0, dtype);
  a.counts = send_counts;
  a.recv_counts = recv_counts;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Gather(const void* send, void* recv, std::size_t count, DataType dtype,
                                                   int root, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kGather, send, recv, count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Scatter(const void* send, void* recv, std::size_t count, DataType dtype,
                                                    int root, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kScatter, send, recv, count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Barrier(const OpOptions& opts) {
  return impl_->Submit(Args(CollectiveKind::kBarrier, nullptr, nullptr, 0, DataType::kUInt8), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Send(const void* buffer, std::size_t count, DataType dtype, int peer,
                                                 int tag, const OpOptions& opts) {
  auto a = Args(CollectiveKind::kSend, buffer, nullptr, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return impl_->Submit(std::move(a), opts);
}
Result<ProcessGroup::WorkPtr> ProcessGroup::Recv(void* buffer, std::size_t count, DataType dtype, int peer, int tag,
                                                 const OpOptions& opts) {
  auto a = Args(CollectiveKind::kRecv, nullptr, buffer, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return impl_->Submit(std::move(a), opts);
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Split(int color, int key) {
  Impl& p = *impl_;
  int split_id = ++p.splits_;
  std::string base = StrCat("split/", split_id, "/");
  COMMKIT_RETURN_IF_ERROR(p.store()->Set(base + std::to_string(p.rank()), StrCat(color, " ", key)));
  std::vector<std::string> keys;
  for (int r = 0; r < p.size(); ++r) keys.push_back(base + std::to_string(r));
  auto all = p.store()->MultiGet(keys, p.options().timeout);
  if (!all.ok()) return all.status().WithContext(StrCat(p.Who(), ": split #", split_id));
  std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, rank), rank)
  for (int r = 0; r < p.size(); ++r) {
    auto parts = commkit::Split(std::string_view((*all)[r]), ' ');
    auto c = parts.size() == 2 ? ParseInt(parts[0]) : std::nullopt;
    auto k = parts.size() == 2 ? ParseInt(parts[1]) : std::nullopt;
    if (!c || !k) return Status::DataLoss(StrCat(p.Who(), ": split #", split_id, ": malformed entry of rank ", r));
    if (*c == color) members.push_back({{static_cast<int>(*k), r}, r});
  }
  if (color < 0) {
    // Backends whose split is collective over the parent (MPI_Comm_split, ncclCommSplit) need every
    // rank, including those that join no sub-group; they return no backend for a negative color.
    BackendContext none;
    none.rank = -1;
    none.size = 0;
    none.group_name = StrCat(p.name(), "/split", split_id, "(none)");
    none.timeout = p.options().timeout;
    none.local_rank = p.options().local_rank;
    none.device = p.options().device;
    auto backend = p.backend().Split(none, color, key);
    if (!backend.ok()) return backend.status().WithContext(StrCat(p.Who(), ": split"));
    return std::unique_ptr<ProcessGroup>();
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (int i = 0; i < static_cast<int>(members.size()); ++i)
    if (members[i].second == p.rank()) new_rank = i;
  ProcessGroupOptions o = p.options();
  o.name = StrCat(p.name(), "/split", split_id, "c", color);
  BackendContext ctx;
  ctx.rank = new_rank;
  ctx.size = static_cast<int>(members.size());
  auto child_store = std::make_shared<PrefixStore>(StrCat("split", split_id, "c", color), p.store());
  ctx.store = std::make_shared<PrefixStore>("backend", child_store);
  ctx.group_name = o.name;
  ctx.timeout = o.timeout;
  ctx.local_rank = o.local_rank;
  ctx.device = o.device;
  auto backend = p.backend().Split(ctx, color, key);
  if (!backend.ok()) return backend.status().WithContext(StrCat(p.Who(), ": split"));
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(std::make_unique<Impl>(child_store, new_rank, ctx.size, o, std::move(backend).value())));
}

}  // namespace commkit
