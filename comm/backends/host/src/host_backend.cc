#include "commkit/comm/host/host_backend.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "commkit/comm/prefix_store.h"
#include "commkit/common/cpu_cache.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "host_engine.h"

namespace commkit::comm::host {

Result<std::unique_ptr<Work>> HostBackend::Run(const CollectiveArgs& a) {
  const auto start = CallStart(a);
  const Deadline deadline = start + a.timeout;
  Status s;
  if (remote_ != nullptr) {
    if (!broken_.ok()) {
      s = Status(broken_.code(), StrCat("an earlier operation failed on this rank; recreate the process group (earlier "
                                        "error: ", broken_.message(), ")"));
    } else {
      consistent_failure_ = false;
      s = RunRemote(a, deadline);
      if (!s.ok() && !consistent_failure_ && a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv)
        broken_ = s;
    }
  } else if (a.kind == CollectiveKind::kSend) {
    s = t_->Send(a.peer, a.tag, a.send, a.count * SizeOf(a.dtype), deadline);
  } else if (a.kind == CollectiveKind::kRecv) {
    s = t_->Recv(a.peer, a.tag, a.recv, a.count * SizeOf(a.dtype), deadline);
  } else if (!broken_.ok()) {
    s = Status(broken_.code(), StrCat("an earlier collective failed on this rank, so the host backend's rounds are no "
                                      "longer aligned across ranks; recreate the process group (earlier error: ",
                                      broken_.message(), ")"));
  } else {
    consistent_failure_ = false;
    s = Dispatch(a, deadline);
    // Mismatches and bad alltoallv counts are seen by every rank in the same round: the group stays usable.
    if (!s.ok() && !consistent_failure_) broken_ = s;
  }
  return CompletedWork(std::move(s), a.sequence, CallDuration(a, start));
}

Status HostBackend::Dispatch(const CollectiveArgs& a, Deadline d) {
  const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  switch (a.kind) {
    case CollectiveKind::kAllreduce: return Reduction(a, d, -1);
    case CollectiveKind::kReduce: return Reduction(a, d, a.root);
    case CollectiveKind::kBroadcast: {
      std::vector<std::size_t>& bytes = Blocks(0);
      bytes[a.root] = a.count * e;
      // Single-copy: every other rank reads the root's buffer straight into its own, one pass against
      // staging's copy in and copy out (which one round of up to a slot runs one after the other).
      const bool single = single_copy_ && P() > 1 &&
                          table_.Select(a.kind, MemoryKind::kHost, bytes[a.root]).algorithm ==
                              CollectiveAlgorithm::kSingleCopy;
      tune::NoteRun("host", single ? CollectiveAlgorithm::kSingleCopy : CollectiveAlgorithm::kFlat);
      if (single) {
        std::vector<std::size_t>& off = offsets_;
        off.assign(p + 1, 0);  // every block (only the root's has bytes) lands at the start of the output
        off[p] = bytes[a.root];
        return SingleCopyGather(a, d, recv, bytes, off, true);
      }
      return Exchange(a, d, recv, bytes, [&](std::size_t lo, const auto& src) {
        if (me() != a.root && src[a.root]) std::memcpy(recv + lo, src[a.root], std::min(S, bytes[a.root] - lo));
      });
    }
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAllgatherv:
    case CollectiveKind::kGather:
      return Gather(a, d);
    case CollectiveKind::kScatter: {
      const std::size_t block = a.count * e;
      std::vector<std::size_t>& bytes = Blocks(0);
      bytes[a.root] = block * p;
      const std::size_t mlo = block * me(), mhi = mlo + block;
      return Exchange(a, d, send, bytes, [&](std::size_t lo, const auto& src) {
        if (!src[a.root]) return;
        std::size_t hi = lo + std::min(S, bytes[a.root] - lo);
        std::size_t x0 = std::max(lo, mlo), x1 = std::min(hi, mhi);
        if (x1 > x0) std::memcpy(recv + (x0 - mlo), src[a.root] + (x0 - lo), x1 - x0);
      });
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      const std::vector<std::size_t>& counts = Counts(a, a.kind == CollectiveKind::kReduceScatterV);
      if (P() > 1 && S / p >= 64) return ReduceScatterPieces(a, d, counts);
      const std::vector<std::size_t>& off = Offsets(counts, e);
      const std::size_t total = off[p], mlo = off[me()], mhi = off[me() + 1];
      COMMKIT_RETURN_IF_ERROR(Exchange(a, d, send, Uniform(total), [&](std::size_t lo, const auto& src) {
        std::size_t hi = lo + std::min(S, total - lo);
        std::size_t x0 = std::max(lo, mlo), x1 = std::min(hi, mhi);
        if (x1 > x0) ReduceAll(a, recv + (x0 - mlo), src, x0 - lo, (x1 - x0) / e);
      }));
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, recv, counts[me()], P());
      return Status::Ok();
    }
    case CollectiveKind::kAlltoall: {
      std::vector<std::size_t> counts(p, a.count);
      return AlltoallBlocks(a, d, std::vector<std::vector<std::size_t>>(p, counts), counts);
    }
    case CollectiveKind::kAlltoallv: {
      // A first round publishes every rank's send and receive counts, so all ranks check the whole
      // matrix (and fail together when it is inconsistent) and know where their blocks are.
      std::vector<std::uint64_t> header(2 * p);
      for (std::size_t q = 0; q < p; ++q) {
        header[q] = a.counts[q];
        header[p + q] = a.recv_counts[q];
      }
      std::vector<std::vector<std::size_t>> sends(p, std::vector<std::size_t>(p)), recvs = sends;
      COMMKIT_RETURN_IF_ERROR(Exchange(a, d, header.data(), Uniform(header.size() * 8),
                                       [&](std::size_t, const auto& src) {
                                         for (std::size_t q = 0; q < p; ++q) {
                                           const auto* h = reinterpret_cast<const std::uint64_t*>(src[q]);
                                           for (std::size_t r = 0; r < p; ++r) {
                                             sends[q][r] = h[r];
                                             recvs[q][r] = h[p + r];
                                           }
                                         }
                                       }));
      for (std::size_t q = 0; q < p; ++q)
        for (std::size_t r = 0; r < p; ++r)
          if (sends[q][r] != recvs[r][q]) {
            consistent_failure_ = true;
            return Status::InvalidArgument(
                StrCat("alltoallv: rank ", q, " sends ", sends[q][r], " elements to rank ", r, ", which expects ",
                       recvs[r][q], " (send_counts[", r, "] on rank ", q, " must equal recv_counts[", q, "] on rank ", r, ")"));
          }
      return AlltoallBlocks(a, d, sends, a.recv_counts);
    }
    case CollectiveKind::kBarrier:
      return Exchange(a, d, nullptr, Uniform(0), [](std::size_t, const auto&) {});
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv: break;
  }
  return Status::Internal("host backend: unexpected collective");
}

Status HostBackend::AlltoallBlocks(const CollectiveArgs& a, Deadline d, const std::vector<std::vector<std::size_t>>& sends,
                      const std::vector<std::size_t>& recv_counts) {
  const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
  std::vector<std::vector<std::size_t>> soff(p);
  std::vector<std::size_t> bytes(p);
  for (std::size_t q = 0; q < p; ++q) {
    soff[q] = algorithms::CountOffsets(sends[q], e);
    bytes[q] = soff[q][p];
  }
  auto roff = algorithms::CountOffsets(recv_counts, e);
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const std::uint8_t* mine = static_cast<const std::uint8_t*>(a.send);
  if (mine == nullptr || mine == recv) {  // in place: the output overwrites the input, stage it
    scratch_.assign(recv, recv + bytes[me()]);
    mine = scratch_.data();
  }
  const std::size_t m = static_cast<std::size_t>(me());
  return Exchange(a, d, mine, bytes, [&](std::size_t lo, const auto& src) {
    for (std::size_t q = 0; q < p; ++q) {
      if (!src[q]) continue;
      std::size_t hi = lo + std::min(S, bytes[q] - lo);
      std::size_t x0 = std::max(lo, soff[q][m]), x1 = std::min(hi, soff[q][m + 1]);
      if (x1 > x0) std::memcpy(recv + roff[q] + (x0 - soff[q][m]), src[q] + (x0 - lo), x1 - x0);
    }
  });
}

Status HostBackend::RunRemote(const CollectiveArgs& args, Deadline d) {
#if COMMKIT_HAVE_UCX
  // UCX tags carry a per-backend operation count, not the group's sequence number: ProcessGroup's
  // fingerprint all-reduce and the operation it checks share one sequence number.
  CollectiveArgs a = args;
  if (a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv) a.sequence = ++remote_ops_;
  const std::size_t bytes = a.count * SizeOf(a.dtype);
  const tune::Choice plan = a.kind == CollectiveKind::kAllreduce ? table_.Select(a.kind, MemoryKind::kHost, bytes)
                                                                 : tune::Choice{};  // ring
  if (a.kind == CollectiveKind::kAllreduce) tune::NoteRun("host", plan.algorithm);
  if (plan.algorithm != CollectiveAlgorithm::kHierarchical)
    return remote_->collectives->Run(a, d,
                                     plan.algorithm == CollectiveAlgorithm::kHalvingDoubling
                                         ? CollectiveAlgorithm::kHalvingDoubling
                                         : CollectiveAlgorithm::kRing);
  const bool avg = a.op.kind == ReduceKind::kAvg;
  CollectiveArgs local = a;
  local.kind = CollectiveKind::kReduce;
  local.root = 0;
  if (avg) local.op = ReduceOp::Sum();
  COMMKIT_RETURN_IF_ERROR(Reduction(local, d, 0));
  if (remote_->leader) {
    ReduceKind between = avg || a.op.kind == ReduceKind::kPreMulSum ? ReduceKind::kSum : a.op.kind;
    const CollectiveAlgorithm leaders = plan.params.between == CollectiveAlgorithm::kHalvingDoubling
                                            ? CollectiveAlgorithm::kHalvingDoubling
                                            : CollectiveAlgorithm::kRing;
    COMMKIT_RETURN_IF_ERROR(
        remote_->collectives->Allreduce(leaders, a, a.recv, a.count, between, remote_->leaders, d));
    if (avg) DivideInPlace(a.dtype, a.recv, a.count, remote_->size);
  }
  CollectiveArgs bcast = a;
  bcast.kind = CollectiveKind::kBroadcast;
  bcast.root = 0;
  bcast.send = a.recv;
  return Dispatch(bcast, d);
#else
  (void)args;
  (void)d;
  return Status::Internal("host backend: built without UCX");
#endif
}

Result<std::unique_ptr<Backend>> CreateHostBackend(const BackendContext& context) {
  ShmTransportOptions options;
  options.size_setting = "COMMKIT_HOST_SLOT_BYTES";
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t slot, EnvIntOr("COMMKIT_HOST_SLOT_BYTES", 1 << 20, 64 << 10, std::int64_t{1} << 30));
  options.slot_bytes = static_cast<std::size_t>(slot) / 64 * 64;  // every element size divides it
  // A wait spins this long before it sleeps, when every rank has a core. Single-copy readers take
  // 20-50 us per 512 KiB-1 MiB: a waiter that slept meanwhile paid a futex wake-up as large again
  // on the development VM (docs/host-backend.md, "Waiting").
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t spin_us, EnvIntOr("COMMKIT_HOST_SPIN_US", 250, 0, 10'000'000));
  options.spin = std::chrono::microseconds(spin_us);
  // Where rounds start rotating in the slot (ShmTransportOptions::rotate_from): by CPU vendor
  // (RotateFromFor). Every rank of a host reads the same CPU.
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t rotate, EnvIntOr("COMMKIT_HOST_ROTATE_BYTES",
                                                         static_cast<std::int64_t>(RotateFromFor(ThisCpuVendor())), 0,
                                                         std::int64_t{1} << 40));
  options.rotate_from = static_cast<std::size_t>(rotate);
  const std::string who = StrCat("host backend, rank ", context.rank, "/", context.size, " of ", context.group_name);
  // HostBackend::Streams(): the cache of the CPU this rank starts on (no streaming when sysfs does not say).
  const std::optional<CpuCache> cache = LastLevelCache(*SystemView::Live(), ::sched_getcpu());
  COMMKIT_ASSIGN_OR_RETURN(std::int64_t stream_from, EnvIntOr("COMMKIT_HOST_STREAM_BYTES",
                                                              cache ? static_cast<std::int64_t>(cache->bytes) : 0, 0,
                                                              std::int64_t{1} << 50));

  // Which ranks share a host (its /dev/shm): hosts ordered by their lowest rank.
  auto domains = StoreExchange(context, "")("hosts", shm::ShmDomain());
  if (!domains.ok()) return domains.status().WithContext(StrCat(who, ": waiting for every rank to arrive"));
  std::vector<std::string> order;
  std::vector<std::vector<int>> hosts;
  for (int q = 0; q < context.size; ++q) {
    const auto h = static_cast<std::size_t>(std::find(order.begin(), order.end(), (*domains)[q]) - order.begin());
    if (h == order.size()) order.push_back((*domains)[q]), hosts.emplace_back();
    hosts[h].push_back(q);
  }
  // Which algorithm runs at each size: the selection table (COMMKIT_TUNE, calibration, topology, defaults).
  std::size_t most = 0;
  for (const auto& h : hosts) most = std::max(most, h.size());
  auto table = tune::Table::ForBackend(
      "host", context, tune::LocalGroupShape(context.size, static_cast<int>(most), static_cast<int>(hosts.size())));
  if (!table.ok()) return table.status().WithContext(who);
  if (hosts.size() == 1) {
    COMMKIT_ASSIGN_OR_RETURN(auto transport, ShmTransport::Connect(context.rank, context.size, context.group_name,
                                                                   StoreExchange(context, "host/"), options));
    std::string why_not;
    COMMKIT_ASSIGN_OR_RETURN(const bool single_copy,
                             SingleCopyPossible(StoreExchange(context, "host/"), context.rank, &why_not));
    if (!single_copy && context.rank == 0)
      COMMKIT_LOG_INFO(who, ": all-gathers stage every block through shared memory (single_copy off: ", why_not,
                       "; kernel.yama.ptrace_scope above 1, a seccomp filter without process_vm_readv, or ranks in different pid namespaces refuse it)");
    return std::unique_ptr<Backend>(
        new HostBackend(std::move(transport), std::move(*table), nullptr, stream_from, single_copy));
  }
#if COMMKIT_HAVE_UCX
  const std::size_t mine = static_cast<std::size_t>(
      std::find(order.begin(), order.end(), (*domains)[context.rank]) - order.begin());
  BackendContext local = context;
  local.rank = static_cast<int>(std::find(hosts[mine].begin(), hosts[mine].end(), context.rank) - hosts[mine].begin());
  local.size = static_cast<int>(hosts[mine].size());
  local.store = std::make_shared<PrefixStore>(StrCat("host", mine), context.store);
  local.group_name = StrCat(context.group_name, "/host", mine);
  options.names = hosts[mine];  // errors name group ranks, not ranks within the host
  COMMKIT_ASSIGN_OR_RETURN(auto transport, ShmTransport::Connect(local.rank, local.size, local.group_name,
                                                                 StoreExchange(local, "host/"), options));
  auto remote = std::make_unique<RemoteState>();
  COMMKIT_ASSIGN_OR_RETURN(remote->ucx, UcxTransport::Connect(context));
  remote->collectives = std::make_unique<RemoteCollectives>(*remote->ucx);
  for (const auto& h : hosts) remote->leaders.push_back(h.front());
  remote->leader = local.rank == 0;
  remote->size = context.size;
  if (context.rank == 0)
    COMMKIT_LOG_INFO(who, ": ", context.size, " ranks on ", hosts.size(), " hosts (shared memory within, UCX between); "
                     "all-reduce: ", tune::Describe(*table, CollectiveKind::kAllreduce, MemoryKind::kHost));
  return std::unique_ptr<Backend>(
      new HostBackend(std::move(transport), std::move(*table), std::move(remote), stream_from, false));
#else
  return Status::Unavailable(StrCat(who, ": the ranks span ", hosts.size(), " hosts and this build has no UCX for the "
                                    "transport between them (apt install libucx-dev; COMMKIT_WITH_UCX=ON); use gloo or mpi"));
#endif
}

BackendInfo HostBackendInfo() {
  BackendInfo info;
  info.name = "host";
  info.memory = MemoryKind::kHost;
  info.available = true;
  info.create = &CreateHostBackend;
  return info;
}

}  // namespace commkit::comm::host
