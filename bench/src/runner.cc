#include "commkit/bench/runner.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>

#include "commkit/comm/reduce_kernels.h"
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

// The buffers of one placement and the pointers handed to the collective.
struct Buffers {
  std::vector<unsigned char> send_storage, recv_storage;
  void* send = nullptr;
  void* recv = nullptr;
  void* out = nullptr;      // where the result is read
  std::size_t out_count = 0;
};

Buffers Allocate(const BenchOptions& o, const BufferCounts& c, std::size_t elem, int rank, bool in_place) {
  Buffers b;
  const auto r = static_cast<std::size_t>(rank);
  if (!in_place) {
    b.send_storage.resize(std::max<std::size_t>(c.send * elem, 1));
    b.recv_storage.resize(std::max<std::size_t>(c.recv * elem, 1));
    b.send = b.send_storage.data();
    b.recv = b.out = b.recv_storage.data();
    b.out_count = c.recv;
    return b;
  }
  switch (o.collective) {
    case BenchCollective::kAllgather:  // send = the rank's chunk of the receive buffer
      b.recv_storage.resize(std::max<std::size_t>(c.recv * elem, 1));
      b.recv = b.out = b.recv_storage.data();
      b.send = b.recv_storage.data() + r * c.count * elem;
      b.out_count = c.recv;
      break;
    case BenchCollective::kReduceScatter:  // recv = the rank's chunk of the send buffer
      b.send_storage.resize(std::max<std::size_t>(c.send * elem, 1));
      b.send = b.send_storage.data();
      b.recv = b.out = b.send_storage.data() + r * c.count * elem;
      b.out_count = c.recv;
      break;
    default:
      b.recv_storage.resize(std::max<std::size_t>(c.recv * elem, 1));
      b.send = b.recv = b.out = b.recv_storage.data();
      b.out_count = c.recv;
      break;
  }
  return b;
}

void FillInputs(const BenchOptions& o, const BufferCounts& c, Buffers& b, int rank, bool in_place, unsigned salt) {
  const DataType t = o.dtype;
  if (in_place && o.collective == BenchCollective::kAllgather) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(b.recv, t, i, -1);  // stale marker
    for (std::size_t i = 0; i < c.send; ++i) StoreValue(b.send, t, i, InputValue(o, rank, i, salt));
    return;
  }
  for (std::size_t i = 0; i < c.send; ++i) StoreValue(b.send, t, i, InputValue(o, rank, i, salt));
  if (!in_place) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(b.recv, t, i, -1);
  } else if (o.collective == BenchCollective::kBroadcast && rank != o.root) {
    for (std::size_t i = 0; i < c.recv; ++i) StoreValue(b.recv, t, i, -1);
  }
}

long long CountWrong(const BenchOptions& o, const BufferCounts& c, const Buffers& b, int rank, int nranks,
                     unsigned salt) {
  if (o.collective == BenchCollective::kReduce && rank != o.root) return 0;  // output undefined off-root
  long long wrong = 0;
  for (std::size_t i = 0; i < b.out_count; ++i) {
    const double want = Representable(o.dtype, ExpectedValue(o, c, rank, nranks, i, salt));
    if (!Matches(o.dtype, o.op.kind, LoadValue(b.out, o.dtype, i), want)) ++wrong;
  }
  return wrong;
}

Status WaitFor(Result<ProcessGroup::WorkPtr> work, std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(work.status());
  return (*work)->Wait(timeout);
}

// The single dispatch on the collective (house rule 7).
Status RunOnce(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const Buffers& b,
               const SweepOptions& sweep) {
  if (sweep.raw != nullptr) return sweep.raw->run(b.send, b.recv, c);
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  const OpOptions opts{.timeout = timeout};
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

Result<double> MaxOverRanks(ProcessGroup& g, double value, std::chrono::milliseconds timeout) {
  double out = 0;
  COMMKIT_RETURN_IF_ERROR(WaitFor(g.Allreduce(&value, &out, 1, DataType::kFloat64, ReduceOp::Max(),
                                              {.timeout = timeout}), timeout));
  return out;
}

Result<long long> SumOverRanks(ProcessGroup& g, long long value, std::chrono::milliseconds timeout) {
  std::int64_t in = value, out = 0;
  COMMKIT_RETURN_IF_ERROR(WaitFor(g.Allreduce(&in, &out, 1, DataType::kInt64, ReduceOp::Sum(),
                                              {.timeout = timeout}), timeout));
  return static_cast<long long>(out);
}

Result<Measurement> Measure(ProcessGroup& g, const BenchOptions& o, const BufferCounts& c, const IterCounts& it,
                            bool in_place, unsigned salt, const SweepOptions& sweep) {
  const int rank = g.rank(), nranks = g.size();
  const std::size_t elem = SizeOf(o.dtype);
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);
  Buffers b = Allocate(o, c, elem, rank, in_place);
  FillInputs(o, c, b, rank, in_place, salt);
  auto where = [&](const Status& s) {
    return Status(s.code(), StrCat("commkit-bench: ", ToString(o.collective), " ", c.bytes, " B ",
                                   in_place ? "in-place" : "out-of-place", " on rank ", rank, "/", nranks, ": ",
                                   s.message()));
  };
  for (int i = 0; i < it.warmup; ++i) {
    if (Status s = RunOnce(g, o, c, b, sweep); !s.ok()) return where(s);
  }
  if (Status s = WaitFor(g.Barrier({.timeout = timeout}), timeout); !s.ok()) return where(s);
  const auto start = Clock::now();
  for (int i = 0; i < it.iters; ++i) {
    if (Status s = RunOnce(g, o, c, b, sweep); !s.ok()) return where(s);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / it.iters;
  COMMKIT_ASSIGN_OR_RETURN(double max_seconds, MaxOverRanks(g, seconds, timeout));
  Measurement m;
  m.valid = true;
  m.time_us = max_seconds * 1e6;
  const Bandwidth bw = ComputeBandwidth(o.collective, c.bytes, max_seconds, nranks);
  m.algbw_gbps = bw.algbw_gbps;
  m.busbw_gbps = bw.busbw_gbps;
  if (o.check) {
    FillInputs(o, c, b, rank, in_place, salt);
    if (Status s = RunOnce(g, o, c, b, sweep); !s.ok()) return where(s);
    COMMKIT_ASSIGN_OR_RETURN(m.wrong, SumOverRanks(g, CountWrong(o, c, b, rank, nranks, salt), timeout));
  }
  return m;
}

// nccl-tests style: warm up at the largest size before the sweep (connections, allocations; also primes
// Gloo's TCP send buffers, which otherwise stall on delayed ACKs when messages grow; platform-notes.md).
Status Prime(ProcessGroup& g, const BenchOptions& o, std::size_t max_bytes, const SweepOptions& sweep) {
  const CollectiveDescriptor& d = Describe(o.collective);
  const BufferCounts c = d.counts(max_bytes, SizeOf(o.dtype), g.size());
  const IterCounts it = ItersForSize(o, c.bytes);
  Buffers b = Allocate(o, c, SizeOf(o.dtype), g.rank(), !d.has_out_of_place);
  FillInputs(o, c, b, g.rank(), !d.has_out_of_place, 0);
  for (int i = 0; i < std::max(1, it.warmup); ++i) COMMKIT_RETURN_IF_ERROR(RunOnce(g, o, c, b, sweep));
  return Status::Ok();
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
    if (!group.Supports(kind, o.dtype, MemoryKind::kHost, o.op)) {
      return Status::NotSupported(StrCat("commkit-bench: backend '", group.backend_name(), "' does not support ",
                                         d.name, " of ", ToString(o.dtype),
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
