#include "commkit/bench/runner.h"

#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "commkit/bench/device.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/check.h"
#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

using Clock = std::chrono::steady_clock;

void StoreValue(void* buf, DataType t, std::size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<unsigned short*>(buf)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      static_cast<unsigned short*>(buf)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kInt8: static_cast<std::int8_t*>(buf)[i] = static_cast<std::int8_t>(static_cast<long long>(v)); break;
    case DataType::kUInt8:
      static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(static_cast<long long>(v));
      break;
    case DataType::kInt32:
      static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(static_cast<long long>(v));
      break;
    case DataType::kInt64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); break;
  }
}

double LoadValue(const void* buf, DataType t, std::size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const unsigned short*>(buf)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const unsigned short*>(buf)[i]);
    case DataType::kInt8: return static_cast<const std::int8_t*>(buf)[i];
    case DataType::kUInt8: return static_cast<const std::uint8_t*>(buf)[i];
    case DataType::kInt32: return static_cast<const std::int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
  }
  return 0;
}

// What the stored expected value reads back as (integer wrap-around, f16/bf16 rounding).
double Representable(DataType t, double v) {
  unsigned char tmp[8];
  StoreValue(tmp, t, 0, v);
  return LoadValue(tmp, t, 0);
}

bool Matches(DataType t, ReduceKind kind, double got, double want) {
  if (!IsFloatingPoint(t)) {
    return kind == ReduceKind::kAvg ? std::fabs(got - want) <= 1.0 : got == want;
  }
  const double tol = t == DataType::kBFloat16 ? 1e-2 : t == DataType::kFloat16 ? 1e-3 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Host memory of one benchmark buffer, zero-filled. From 2 MiB on it is 2 MiB-aligned and advised as
// transparent huge pages (MADV_HUGEPAGE; nothing changes where THP is off): with 4 KiB pages a 64 MiB
// all-reduce on a VM spends much of its time in page walks, and which runs hit them varied from launch
// to launch (docs/benchmarks.md). scripts/peer-bench allocates every peer's buffers the same way.
class HostBuffer {
 public:
  void resize(std::size_t n) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const bool huge = n >= kHuge;
    const std::size_t align = huge ? kHuge : 64, bytes = (n + align - 1) / align * align;
    mem_.reset(static_cast<unsigned char*>(std::aligned_alloc(align, bytes)));
    COMMKIT_CHECK(mem_ != nullptr, "out of memory allocating a ", n, "-byte benchmark buffer");
    if (huge) (void)::madvise(mem_.get(), bytes, MADV_HUGEPAGE);
    std::memset(mem_.get(), 0, bytes);  // faulted in (and, where THP allows, as huge pages) before timing
    size_ = n;
  }
  unsigned char* data() { return mem_.get(); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> mem_;
  std::size_t size_ = 0;
};

// The buffers of one placement: one or two storages (0: send, 1: receive; in-place variants use one),
// their host images and, for device backends, device copies. The collective gets pointers into the
// device copies then; inputs are written into the host images and copied in, results are copied out
// and checked on the host.
struct Buffers {
  struct Ref {
    int storage = 0;
    std::size_t offset = 0;  // bytes
  };
  HostBuffer host[2];
  DeviceMemory device[2];
  Ref send_ref, recv_ref;  // the result is read at recv_ref
  std::size_t out_count = 0;
  void* send = nullptr;  // what the collective is given
  void* recv = nullptr;
  Device* gpu = nullptr;

  unsigned char* Host(Ref r) { return host[r.storage].data() + r.offset; }
  void* Target(Ref r) {
    return gpu != nullptr ? static_cast<unsigned char*>(device[r.storage].get()) + r.offset : Host(r);
  }
  // Host images -> device copies (no-op for host memory).
  Status CopyIn() {
    if (gpu == nullptr) return Status::Ok();
    for (int i = 0; i < 2; ++i) {
      if (device[i] != nullptr) COMMKIT_RETURN_IF_ERROR(gpu->CopyToDevice(device[i].get(), host[i].data(), host[i].size()));
    }
    return Status::Ok();
  }
  // The storage holding the result -> its host image.
  Status CopyOut() {
    if (gpu == nullptr) return Status::Ok();
    const int i = recv_ref.storage;
    return gpu->CopyToHost(host[i].data(), device[i].get(), host[i].size());
  }
};

Result<Buffers> Allocate(const BenchOptions& o, const BufferCounts& c, std::size_t elem, int rank, bool in_place,
                         Device* gpu) {
  Buffers b;
  const auto r = static_cast<std::size_t>(rank);
  b.out_count = c.recv;
  if (!in_place) {
    b.host[0].resize(std::max<std::size_t>(c.send * elem, 1));
    b.host[1].resize(std::max<std::size_t>(c.recv * elem, 1));
    b.send_ref = {0, 0};
    b.recv_ref = {1, 0};
  } else {
    switch (o.collective) {
      case BenchCollective::kAllgather:  // send = the rank's chunk of the receive buffer
        b.host[1].resize(std::max<std::size_t>(c.recv * elem, 1));
        b.send_ref = {1, r * c.count * elem};
        b.recv_ref = {1, 0};
        break;
      case BenchCollective::kReduceScatter:  // recv = the rank's chunk of the send buffer
        b.host[0].resize(std::max<std::size_t>(c.send * elem, 1));
        b.send_ref = {0, 0};
        b.recv_ref = {0, r * c.count * elem};
        break;
      default:
        b.host[1].resize(std::max<std::size_t>(c.recv * elem, 1));
        b.send_ref = b.recv_ref = {1, 0};
        break;
    }
  }
  if (gpu != nullptr) {
    b.gpu = gpu;
    for (int i = 0; i < 2; ++i) {
      if (b.host[i].empty()) continue;
      COMMKIT_ASSIGN_OR_RETURN(b.device[i], gpu->Allocate(b.host[i].size()));
    }
  }
  b.send = b.Target(b.send_ref);
  b.recv = b.Target(b.recv_ref);
  return b;
}

Status FillInputs(const BenchOptions& o, const BufferCounts& c, Buffers& b, int rank, bool in_place, unsigned salt) {
  const DataType t = o.dtype;
  void* send = b.Host(b.send_ref);
  void* recv = b.Host(b.recv_ref);
  if (in_place && o.collective == BenchCollective::kAllgather) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(recv, t, i, -1);  // stale marker
    for (std::size_t i = 0; i < c.send; ++i) StoreValue(send, t, i, InputValue(o, rank, i, salt));
    return b.CopyIn();
  }
  for (std::size_t i = 0; i < c.send; ++i) StoreValue(send, t, i, InputValue(o, rank, i, salt));
  if (!in_place) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(recv, t, i, -1);
  } else if (o.collective == BenchCollective::kBroadcast && rank != o.root) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(recv, t, i, -1);
  }
  return b.CopyIn();
}

// Copies the result back (device backends) and counts the elements that differ from the expectation.
Result<long long> CountWrong(const BenchOptions& o, const BufferCounts& c, Buffers& b, int rank, int nranks,
                             unsigned salt) {
  if (o.collective == BenchCollective::kReduce && rank != o.root) return 0LL;  // output undefined off-root
  COMMKIT_RETURN_IF_ERROR(b.CopyOut());
  const void* out = b.Host(b.recv_ref);
  long long wrong = 0;
  for (std::size_t i = 0; i < b.out_count; ++i) {
    const double want = Representable(o.dtype, ExpectedValue(o, c, rank, nranks, i, salt));
    if (!Matches(o.dtype, o.op.kind, LoadValue(out, o.dtype, i), want)) ++wrong;
  }
  return wrong;
}

Status WaitFor(Result<ProcessGroup::WorkPtr> work, std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(work.status());
  return (*work)->Wait(timeout);
}

// The single dispatch on the collective (house rule 7). Host backends: returns when the call is
// complete. Device backends: returns once the call is on the stream (Work::Wait orders the stream).
Status RunOnce(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const Buffers& b,
               const SweepOptions& sweep) {
  if (sweep.raw != nullptr) return sweep.raw->run(b.send, b.recv, c);
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  OpOptions opts{.timeout = timeout};
  if (sweep.device != nullptr) {
    opts.memory = MemoryKind::kDevice;
    opts.stream = sweep.device->stream();
  }
  switch (o.collective) {
    case BenchCollective::kAllreduce:
      return WaitFor(g.Allreduce(b.send, b.recv, c.count, o.dtype, o.op, opts), timeout);
    case BenchCollective::kAllgather:
      return WaitFor(g.Allgather(b.send, b.recv, c.count, o.dtype, opts), timeout);
    case BenchCollective::kReduceScatter:
      return WaitFor(g.ReduceScatter(b.send, b.recv, c.count, o.dtype, o.op, opts), timeout);
    case BenchCollective::kBroadcast:
      return WaitFor(g.Broadcast(b.recv, c.count, o.dtype, o.root, opts), timeout);
    case BenchCollective::kReduce:
      return WaitFor(g.Reduce(b.send, b.recv, c.count, o.dtype, o.op, o.root, opts), timeout);
    case BenchCollective::kAlltoall:
      return WaitFor(g.Alltoall(b.send, b.recv, c.count, o.dtype, opts), timeout);
    case BenchCollective::kSendRecv: {
      // Ring exchange, like MPI_Sendrecv: post the send and the receive, then wait for both. The
      // group progresses sends and receives independently, so every rank may send first.
      const int p = g.size(), r = g.rank();
      auto send = g.Send(b.send, c.count, o.dtype, (r + 1) % p, 0, opts);
      auto recv = g.Recv(b.recv, c.count, o.dtype, (r - 1 + p) % p, 0, opts);
      Status sent = WaitFor(std::move(send), timeout);
      Status received = WaitFor(std::move(recv), timeout);
      COMMKIT_RETURN_IF_ERROR(sent);
      return received;
    }
  }
  return Status::Internal("commkit-bench: unknown collective");
}

// The control group: barriers and the cross-rank reductions of times and wrong counts.
ProcessGroup& Control(ProcessGroup& g, const SweepOptions& sweep) {
  return sweep.control != nullptr ? *sweep.control : g;
}

// The per-rank `value` combined as -a says: rank 0's, the mean, the minimum or the maximum.
Result<double> CombineOverRanks(ProcessGroup& ctl, double value, TimeAggregate how, std::chrono::milliseconds timeout) {
  double in = value, out = 0;
  ReduceOp op = ReduceOp::Max();
  switch (how) {
    case TimeAggregate::kRank0: in = ctl.rank() == 0 ? value : 0; op = ReduceOp::Sum(); break;
    case TimeAggregate::kMean: op = ReduceOp::Sum(); break;
    case TimeAggregate::kMin: op = ReduceOp::Min(); break;
    case TimeAggregate::kMax: break;
  }
  COMMKIT_RETURN_IF_ERROR(
      WaitFor(ctl.Allreduce(&in, &out, 1, DataType::kFloat64, op, {.timeout = timeout}), timeout));
  if (how == TimeAggregate::kMean) out /= ctl.size();
  return out;
}

Result<long long> SumOverRanks(ProcessGroup& g, long long value, std::chrono::milliseconds timeout) {
  std::int64_t in = value, out = 0;
  COMMKIT_RETURN_IF_ERROR(WaitFor(g.Allreduce(&in, &out, 1, DataType::kInt64, ReduceOp::Sum(),
                                              {.timeout = timeout}), timeout));
  return static_cast<long long>(out);
}

// Drains the device stream (device backends; nothing to do for host ones).
Status Drain(const SweepOptions& sweep, std::chrono::milliseconds timeout) {
  return sweep.device != nullptr ? sweep.device->Synchronize(timeout) : Status::Ok();
}

// One timed call and what -z asks after it.
Status TimedCall(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const Buffers& b,
                 const SweepOptions& sweep) {
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  COMMKIT_RETURN_IF_ERROR(RunOnce(g, o, c, b, sweep));
  if (o.blocking == 0) return Status::Ok();
  COMMKIT_RETURN_IF_ERROR(Drain(sweep, timeout));
  if (o.blocking == 1) return WaitFor(Control(g, sweep).Barrier({.timeout = timeout}), timeout);
  return Status::Ok();
}

// Seconds per call on this rank, and (device backends) host seconds to issue one call.
struct RankTime {
  double seconds = 0;
  double issue_seconds = 0;
};

Result<RankTime> TimeHost(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const IterCounts& it,
                          const Buffers& b, const SweepOptions& sweep) {
  const auto start = Clock::now();
  for (int i = 0; i < it.iters; ++i) COMMKIT_RETURN_IF_ERROR(TimedCall(g, o, c, b, sweep));
  return RankTime{std::chrono::duration<double>(Clock::now() - start).count() / it.iters, 0};
}

// CUDA events on the stream around the timed calls, or around -G launches of a graph of them.
Result<RankTime> TimeDevice(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const IterCounts& it,
                            const Buffers& b, const SweepOptions& sweep) {
  Device& gpu = *sweep.device;
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  RankTime t;
  if (o.graph_launches > 0) {
    COMMKIT_RETURN_IF_ERROR(gpu.BeginCapture());
    Status captured = Status::Ok();
    for (int i = 0; i < it.iters && captured.ok(); ++i) captured = RunOnce(g, o, c, b, sweep);
    Status ended = gpu.EndCapture();
    COMMKIT_RETURN_IF_ERROR(captured);
    COMMKIT_RETURN_IF_ERROR(ended);
    COMMKIT_RETURN_IF_ERROR(WaitFor(Control(g, sweep).Barrier({.timeout = timeout}), timeout));
    const auto start = Clock::now();
    COMMKIT_RETURN_IF_ERROR(gpu.RecordStart());
    for (int l = 0; l < o.graph_launches; ++l) COMMKIT_RETURN_IF_ERROR(gpu.LaunchGraph());
    COMMKIT_RETURN_IF_ERROR(gpu.RecordStop());
    const double calls = static_cast<double>(it.iters) * o.graph_launches;
    t.issue_seconds = std::chrono::duration<double>(Clock::now() - start).count() / calls;
    COMMKIT_ASSIGN_OR_RETURN(double elapsed, gpu.ElapsedSeconds(timeout));
    t.seconds = elapsed / calls;
    return t;
  }
  const auto start = Clock::now();
  COMMKIT_RETURN_IF_ERROR(gpu.RecordStart());
  for (int i = 0; i < it.iters; ++i) COMMKIT_RETURN_IF_ERROR(TimedCall(g, o, c, b, sweep));
  COMMKIT_RETURN_IF_ERROR(gpu.RecordStop());
  t.issue_seconds = std::chrono::duration<double>(Clock::now() - start).count() / it.iters;
  COMMKIT_ASSIGN_OR_RETURN(double elapsed, gpu.ElapsedSeconds(timeout));
  t.seconds = elapsed / it.iters;
  return t;
}

Result<Measurement> Measure(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const IterCounts& it,
                            bool in_place, unsigned salt, const SweepOptions& sweep) {
  const int rank = g.rank(), nranks = g.size();
  const std::size_t elem = SizeOf(o.dtype);
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  ProcessGroup& ctl = Control(g, sweep);
  auto where = [&](const Status& s) {
    return Status(s.code(), StrCat("commkit-bench: ", ToString(o.collective), " ", c.bytes, " B ",
                                   in_place ? "in-place" : "out-of-place", " on rank ", rank, "/", nranks, ": ",
                                   s.message()));
  };
  auto buffers = Allocate(o, c, elem, rank, in_place, sweep.device);
  if (!buffers.ok()) return where(buffers.status());
  Buffers& b = *buffers;
  if (Status s = FillInputs(o, c, b, rank, in_place, salt); !s.ok()) return where(s);
  for (int i = 0; i < it.warmup; ++i) {
    if (Status s = RunOnce(g, o, c, b, sweep); !s.ok()) return where(s);
  }
  if (Status s = Drain(sweep, timeout); !s.ok()) return where(s);
  if (Status s = WaitFor(ctl.Barrier({.timeout = timeout}), timeout); !s.ok()) return where(s);
  auto time = sweep.device != nullptr ? TimeDevice(g, o, c, it, b, sweep) : TimeHost(g, o, c, it, b, sweep);
  if (!time.ok()) return where(time.status());
  COMMKIT_ASSIGN_OR_RETURN(double seconds, CombineOverRanks(ctl, time->seconds, o.aggregate, timeout));
  Measurement m;
  m.valid = true;
  m.time_us = seconds * 1e6;
  const Bandwidth bw = ComputeBandwidth(o.collective, c.bytes, seconds, nranks);
  m.algbw_gbps = bw.algbw_gbps;
  m.busbw_gbps = bw.busbw_gbps;
  if (sweep.device != nullptr) {
    COMMKIT_ASSIGN_OR_RETURN(double issue, CombineOverRanks(ctl, time->issue_seconds, o.aggregate, timeout));
    m.issue_us = issue * 1e6;
  }
  if (o.check) {
    if (Status s = FillInputs(o, c, b, rank, in_place, salt); !s.ok()) return where(s);
    if (Status s = RunOnce(g, o, c, b, sweep); !s.ok()) return where(s);
    if (Status s = Drain(sweep, timeout); !s.ok()) return where(s);
    auto wrong = CountWrong(o, c, b, rank, nranks, salt);
    if (!wrong.ok()) return where(wrong.status());
    COMMKIT_ASSIGN_OR_RETURN(m.wrong, SumOverRanks(ctl, *wrong, timeout));
  }
  return m;
}

// nccl-tests style: warm up at the largest size before the sweep (connections, allocations; also primes
// Gloo's TCP send buffers, which otherwise stall on delayed ACKs when messages grow; platform-notes.md).
Status Prime(ProcessGroup& g, const BenchOptions& o, std::size_t max_bytes, const SweepOptions& sweep) {
  const CollectiveDescriptor& d = Describe(o.collective);
  const BufferCounts c = d.counts(max_bytes, SizeOf(o.dtype), g.size());
  const IterCounts it = ItersForSize(o, c.bytes);
  COMMKIT_ASSIGN_OR_RETURN(Buffers b, Allocate(o, c, SizeOf(o.dtype), g.rank(), !d.has_out_of_place, sweep.device));
  COMMKIT_RETURN_IF_ERROR(FillInputs(o, c, b, g.rank(), !d.has_out_of_place, 0));
  for (int i = 0; i < std::max(1, it.warmup); ++i) COMMKIT_RETURN_IF_ERROR(RunOnce(g, o, c, b, sweep));
  return Drain(sweep, std::chrono::seconds(o.timeout_s));
}

}  // namespace

Result<std::vector<ResultRow>> RunSweep(ProcessGroup& group, const BenchOptions& o, const SweepOptions& sweep) {
  const CollectiveDescriptor& d = Describe(o.collective);
  if (d.rooted && o.root >= group.size()) {
    return Status::InvalidArgument(
        StrCat("commkit-bench: -r/--root ", o.root, " is out of range for ", group.size(), " ranks"));
  }
  if (o.collective == BenchCollective::kSendRecv && group.size() < 2) {
    return Status::InvalidArgument("commkit-bench: sendrecv needs at least 2 ranks (a ring of sends)");
  }
  if (sweep.raw == nullptr) {
    const CollectiveKind kind = d.kind;
    const MemoryKind memory = sweep.device != nullptr ? MemoryKind::kDevice : MemoryKind::kHost;
    if (!group.Supports(kind, o.dtype, memory, o.op)) {
      return Status::NotSupported(StrCat("commkit-bench: backend '", group.backend_name(), "' does not support ",
                                         d.name, " of ", ToString(o.dtype), " in ", ToString(memory), " memory",
                                         d.reduces ? StrCat(" with ", o.op.ToString()) : std::string()));
    }
  }
  COMMKIT_ASSIGN_OR_RETURN(std::vector<std::size_t> sizes,
                           SizeSweep(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes));
  std::vector<ResultRow> rows;
  const std::size_t elem = SizeOf(o.dtype);
  if (Status s = Prime(group, o, sizes.back(), sweep); !s.ok()) {
    return Status(s.code(), StrCat("commkit-bench: warmup of ", d.name, " at ", sizes.back(), " B on rank ",
                                   group.rank(), "/", group.size(), ": ", s.message()));
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const BufferCounts c = d.counts(sizes[k], elem, group.size());
    const IterCounts it = ItersForSize(o, c.bytes);
    ResultRow row;
    row.backend = sweep.raw != nullptr ? sweep.raw->label : std::string(group.backend_name());
    row.collective = o.collective;
    row.bytes = c.bytes;
    row.count = c.count;
    row.dtype = o.dtype;
    row.op = d.reduces ? std::string(ToString(o.op.kind)) : "none";
    row.root = d.rooted ? o.root : -1;
    row.nranks = group.size();
    row.warmup = it.warmup;
    row.iters = it.iters;
    const unsigned salt = static_cast<unsigned>(k);
    if (o.out_of_place && d.has_out_of_place) {
      COMMKIT_ASSIGN_OR_RETURN(row.out_of_place, Measure(group, o, c, it, false, salt, sweep));
    }
    if (o.in_place && d.has_in_place) {
      COMMKIT_ASSIGN_OR_RETURN(row.in_place, Measure(group, o, c, it, true, salt + 1, sweep));
    }
    rows.push_back(std::move(row));
    if (sweep.progress) sweep.progress(k + 1, sizes.size());
  }
  return rows;
}

}  // namespace commkit::bench
