// The MPI backend's collectives: all-reduce, reduce-scatter(v), all-gather(v), all-to-all(v),
// broadcast and barrier on the algorithm layer over MPI point-to-point (COMMKIT_MPI_COLLECTIVES=auto),
// reduce, gather and scatter as MPI's nonblocking collectives, each polled to its deadline.
#include <algorithm>
#include <numeric>
#include <span>
#include <utility>

#include "commkit/comm/algorithms/algorithms.h"
#include "commkit/comm/reduce_kernels.h"
#include "mpi_backend_impl.h"

namespace commkit::comm::mpi {

// The algorithm layer's transport on the private communicator: every message as MPI_Isend/MPI_Irecv
// (matched in order: one tag), polled to the collective's deadline.
class MpiBackend::Transport final : public algorithms::Transport {
 public:
  Transport(MpiBackend& b, const CollectiveArgs& a) : b_(b), a_(a) {}
  Status Exchange(std::span<algorithms::Message> messages, algorithms::Deadline deadline) override {
    // Messages up to kSegmentedMax go as segments under Open MPI's shared-memory eager limit (4 KiB
    // with header): eager sends need no rendezvous round trip. Larger ones go whole (single copy).
    std::vector<MPI_Request>& reqs = b_.p2p_reqs_;
    reqs.clear();
    int rc = MPI_SUCCESS;
    const char* call = "MPI_Irecv";
    auto post = [&](const algorithms::Message& m) {
      char* p = m.send ? const_cast<char*>(static_cast<const char*>(m.data)) : static_cast<char*>(m.out);
      const std::size_t seg = m.bytes <= kSegmentedMax ? kSegmentBytes : m.bytes;
      std::size_t off = 0;
      do {
        const std::size_t len = std::min(seg, m.bytes - off);
        MPI_Request r = MPI_REQUEST_NULL;
        rc = m.send ? MPI_Isend(p + off, static_cast<int>(len), MPI_BYTE, m.peer, kTag, b_.p2p_comm_, &r)
                    : MPI_Irecv(p + off, static_cast<int>(len), MPI_BYTE, m.peer, kTag, b_.p2p_comm_, &r);
        if (rc != MPI_SUCCESS) return;
        reqs.push_back(r);
        off += len;
      } while (off < m.bytes);
    };
    {
      CallGuard g;
      // Receives first, so a peer's eager send finds its receive posted.
      for (const auto& m : messages)
        if (!m.send && rc == MPI_SUCCESS) post(m);
      for (const auto& m : messages)
        if (m.send && rc == MPI_SUCCESS) {
          call = "MPI_Isend";
          post(m);
        }
    }
    const int n = static_cast<int>(reqs.size());
    if (rc != MPI_SUCCESS) {
      // Those already posted must not outlive this call either.
      return b_.Retire(reqs.data(), n, true, keep_, b_.Check(rc, a_, call));
    }
    return b_.WaitAll(reqs.data(), n, a_, deadline, /*cancellable=*/true, keep_);
  }

 private:
  static constexpr int kTag = 0;
  static constexpr std::size_t kSegmentBytes = 4096 - 128;
  static constexpr std::size_t kSegmentedMax = 8 * kSegmentBytes;
  MpiBackend& b_;
  const CollectiveArgs& a_;
  // A receive MPI could not cancel may still write into the ring's scratch, a send still read the
  // staged input: both leave the backend with the request. (The caller's own buffers are the
  // caller's; see docs/mpi-backend.md.)
  std::function<std::shared_ptr<void>()> keep_ = [this] {
    auto kept = std::make_shared<std::pair<std::vector<char>, std::vector<char>>>(std::move(b_.p2p_scratch_),
                                                                                  std::move(b_.p2p_stage_));
    return std::static_pointer_cast<void>(kept);
  };
};

Status MpiBackend::P2pAlltoall(const CollectiveArgs& a, const std::vector<std::size_t>& send_off,
                               const std::vector<std::size_t>& recv_off, std::size_t send_bytes) {
  const void* in = a.send;
  if (in == nullptr || in == a.recv) {
    // The pairwise exchange reads the input while blocks arrive: an in-place input is staged first.
    p2p_stage_.assign(static_cast<const char*>(a.recv), static_cast<const char*>(a.recv) + send_bytes);
    in = p2p_stage_.data();
  }
  Transport t(*this, a);
  Status st = algorithms::Alltoall(t, algorithms::Group(rank_, size_), in, send_off, a.recv, recv_off,
                                   {CollectiveAlgorithm::kPairwise}, DeadlineFor(a));
  TrimP2pBuffers();
  return st;
}

// Two ranks: each sends the peer's block of its input and reduces the peer's contribution to its own
// block straight into the result, piece by piece (each piece reduced while in cache): no staged copy
// of the input. Pieces are cut by each block's own length, as the ring cuts them.
Status MpiBackend::TwoRankReduceScatter(const CollectiveArgs& a, std::size_t my_off, std::size_t my_count,
                                        std::size_t peer_off, std::size_t peer_count) {
  constexpr std::size_t kPiece = std::size_t{256} << 10;
  const std::size_t es = SizeOf(a.dtype);
  const std::size_t seg = std::max(es, kPiece / es * es);
  const std::size_t my_bytes = my_count * es, peer_bytes = peer_count * es;
  auto pieces = [&](std::size_t len) { return len == 0 ? std::size_t{1} : 1 + (len - 1) / seg; };
  auto piece = [&](std::size_t len, std::size_t k) { return len > k * seg ? std::min(seg, len - k * seg) : 0; };
  if (p2p_scratch_.size() < std::min(my_bytes, seg)) p2p_scratch_.resize(std::min(my_bytes, seg));
  const char* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  const int peer = 1 - rank_;
  const ReduceFunction reduce = GetReduceFunction(a.dtype, BaseKind(a.op.kind));
  Transport t(*this, a);
  const std::size_t nr = pieces(my_bytes), ns = pieces(peer_bytes);
  Status st;
  for (std::size_t k = 0; k < std::max(nr, ns) && st.ok(); ++k) {
    algorithms::Message m[2];
    int n = 0;
    const std::size_t rbytes = piece(my_bytes, k);
    if (k < nr) m[n++] = algorithms::Message::Recv(peer, p2p_scratch_.data(), rbytes);
    if (k < ns) m[n++] = algorithms::Message::Send(peer, in + peer_off + k * seg, piece(peer_bytes, k));
    st = t.Exchange(std::span<algorithms::Message>(m, static_cast<std::size_t>(n)), DeadlineFor(a));
    if (st.ok() && rbytes > 0) reduce(out + k * seg, p2p_scratch_.data(), in + my_off + k * seg, rbytes / es);
  }
  TrimP2pBuffers();
  return st;
}

Status MpiBackend::Dispatch(const CollectiveArgs& a) {
  const std::size_t p = static_cast<std::size_t>(size_);
  const MPI_Datatype type = MpiType(a.dtype);
  const int n = static_cast<int>(std::min<std::size_t>(a.count, INT_MAX));
  const bool v_kind = a.kind == CollectiveKind::kAllgatherv || a.kind == CollectiveKind::kReduceScatterV ||
                      a.kind == CollectiveKind::kAlltoallv;
  if (!v_kind && !FitsInt(a.count * p)) return TooLarge(a, a.count * p);
  const MPI_Op op = IsReduction(a.kind) ? MpiOp(a.dtype, a.op.kind) : MPI_OP_NULL;
  const bool premul = IsReduction(a.kind) && a.op.kind == ReduceKind::kPreMulSum;
  const bool avg = IsReduction(a.kind) && a.op.kind == ReduceKind::kAvg;
  // Every collective meets in the shared-memory slots first (when the group has them): the
  // fingerprints are compared there, and small inputs go along.
  const bool meet = shm_ != nullptr && a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv;
  std::vector<char> scratch;
  // A scaled private copy of `src` (n elements) for PREMUL_SUM.
  auto scaled = [&](const void* src, std::size_t elems) -> const void* {
    scratch.assign(static_cast<const char*>(src), static_cast<const char*>(src) + Bytes(a, elems));
    ScaleInPlace(a.dtype, scratch.data(), elems, a.op.scalar);
    return scratch.data();
  };

  switch (a.kind) {
    case CollectiveKind::kAllreduce: {
      const void* in = a.send;
      // Flat over the slots, recursive doubling, the ring (and its segment) or the library's own: the
      // selection table's choice. Flat without slots (ranks on several nodes, COMMKIT_MPI_COLLECTIVES
      // other than auto) is recursive doubling.
      const tune::Choice selected = table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, Bytes(a, a.count));
      if (meet) {
        const bool flat = selected.algorithm == CollectiveAlgorithm::kFlat && ShmFits(Bytes(a, a.count));
        COMMKIT_RETURN_IF_ERROR(Meet(a, in != nullptr ? in : a.recv, flat ? Bytes(a, a.count) : 0,
                                     premul ? a.op.scalar : 1));
        if (flat && a.count > 0) {
          tune::NoteRun("mpi", CollectiveAlgorithm::kFlat);
          shm_->Reduce(a, 0, a.count);
          return Status::Ok();
        }
      }
      if (a.count == 0) return Status::Ok();
      std::optional<algorithms::AlgorithmChoice> choice;
      if (selected.algorithm == CollectiveAlgorithm::kFlat) {
        choice = algorithms::AlgorithmChoice{CollectiveAlgorithm::kRecursiveDoubling};
      } else {
        choice = algorithms::AllreduceChoice(selected, a.count, size_);
      }
      if (UseP2p(a, a.count) && choice) {
        Transport t(*this, a);
        algorithms::AllreduceArgs args;
        if (premul) {
          if (in != nullptr && in != a.recv) std::memcpy(a.recv, in, Bytes(a, a.count));
          ScaleInPlace(a.dtype, a.recv, a.count, a.op.scalar);
        } else if (in != a.recv) {
          args.in = in;  // out of place: the ring reads the input directly, no copy
        }
        args.buf = a.recv;
        args.count = a.count;
        args.elem_size = SizeOf(a.dtype);
        args.reduce = GetReduceFunction(a.dtype, BaseKind(a.op.kind));
        tune::NoteRun("mpi", choice->algorithm);
        Status st = algorithms::Allreduce(t, algorithms::Group(rank_, size_), args, *choice, DeadlineFor(a), p2p_scratch_);
        TrimP2pBuffers();
        COMMKIT_RETURN_IF_ERROR(st);
      } else {
        tune::NoteRun("mpi", CollectiveAlgorithm::kLibrary);
        if (in != nullptr && in != a.recv) std::memcpy(a.recv, in, Bytes(a, a.count));
        if (premul) ScaleInPlace(a.dtype, a.recv, a.count, a.op.scalar);
        COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Iallreduce", nullptr, 0, a.recv, Bytes(a, a.count), nullptr, {},
                                           [&](const void*, void* recv, MPI_Request* r) {
                                             return MPI_Iallreduce(MPI_IN_PLACE, recv, n, type, op, comm_, r);
                                           }));
      }
      if (avg) DivideInPlace(a.dtype, a.recv, a.count, size_);
      return Status::Ok();
    }
    case CollectiveKind::kBroadcast: {
      if (meet && shm_->ReadsBroadcast(Bytes(a, a.count))) {
        const PeerBuffer announce = SlotMeeting::Announce(a.recv);
        COMMKIT_RETURN_IF_ERROR(Meet(a, &announce, sizeof announce, 1, sizeof announce));
        return AfterPeerReads(shm_->ReadBroadcast(a, DeadlineFor(a)));
      }
      if (meet) {
        const bool via = ShmGathers(Bytes(a, a.count));
        COMMKIT_RETURN_IF_ERROR(
            Meet(a, a.recv, via && rank_ == a.root ? Bytes(a, a.count) : 0, 1, via ? Bytes(a, a.count) : 0));
        if (via) {
          shm_->Broadcast(a);
          return Status::Ok();
        }
      }
      if (a.count == 0) return Status::Ok();
      // Two ranks: the tree is one message at any size.
      if (UseP2p(a, a.count) && (size_ == 2 || Bytes(a, a.count) <= kP2pBroadcastMaxBytes)) {
        Transport t(*this, a);
        return algorithms::Broadcast(t, algorithms::Group(rank_, size_), a.root, a.recv, Bytes(a, a.count),
                                     {CollectiveAlgorithm::kBinomialTree}, DeadlineFor(a));
      }
      return PostStaged(a, "MPI_Ibcast", nullptr, 0, a.recv, Bytes(a, a.count), nullptr, {},
                        [&](const void*, void* buf, MPI_Request* r) { return MPI_Ibcast(buf, n, type, a.root, comm_, r); });
    }
    case CollectiveKind::kReduce: {
      if (meet) COMMKIT_RETURN_IF_ERROR(Meet(a, nullptr, 0));
      if (a.count == 0) return Status::Ok();
      const void* in = a.send != nullptr ? a.send : a.recv;
      if (premul) in = scaled(in, a.count);
      const bool root = rank_ == a.root;
      const void* send = (root && in == a.recv) ? MPI_IN_PLACE : in;
      COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Ireduce", send, Bytes(a, a.count), root ? a.recv : nullptr,
                                         Bytes(a, a.count), &scratch, {}, [&](const void* s, void* recv, MPI_Request* r) {
                                           return MPI_Ireduce(s, recv, n, type, op, a.root, comm_, r);
                                         }));
      if (avg && root) DivideInPlace(a.dtype, a.recv, a.count, size_);
      return Status::Ok();
    }
    case CollectiveKind::kAllgather: {
      char* mine = static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_));
      if (meet && shm_->ReadsGather(Bytes(a, a.count))) return ReadGather(a);
      if (meet) {
        // In place the input is this rank's block, or (send == recv) the buffer's start.
        const bool via = ShmGathers(Bytes(a, a.count));
        COMMKIT_RETURN_IF_ERROR(Meet(a, a.send != nullptr ? a.send : mine, via ? Bytes(a, a.count) : 0));
        if (via) {
          shm_->Gather(a, {});
          return Status::Ok();
        }
      }
      if (a.count == 0) return Status::Ok();
      const void* send = (a.send == nullptr || a.send == a.recv || a.send == mine) ? MPI_IN_PLACE : a.send;
      if (send == MPI_IN_PLACE && a.send == a.recv && rank_ != 0) std::memmove(mine, a.recv, Bytes(a, a.count));
      if (UseP2p(a, a.count * p)) {
        Transport t(*this, a);
        if (send != MPI_IN_PLACE && size_ == 2) {
          // Two ranks, out of place: the input goes straight from the caller's buffer, and the local
          // copy comes after the exchange. (Sent from the receive buffer right after copying it there,
          // 256 KiB took 2-17x as long as MPI_Allgather here.)
          const int peer = 1 - rank_;
          algorithms::Message m[2] = {
              algorithms::Message::Recv(peer, static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(peer)),
                                        Bytes(a, a.count)),
              algorithms::Message::Send(peer, send, Bytes(a, a.count))};
          COMMKIT_RETURN_IF_ERROR(t.Exchange(std::span<algorithms::Message>(m, 2), DeadlineFor(a)));
          std::memcpy(mine, send, Bytes(a, a.count));
          return Status::Ok();
        }
        if (send != MPI_IN_PLACE) std::memcpy(mine, send, Bytes(a, a.count));
        return algorithms::Allgather(t, algorithms::Group(rank_, size_), a.recv,
                                     algorithms::EvenOffsets(a.count * p, size_, SizeOf(a.dtype)),
                                     {CollectiveAlgorithm::kRing}, DeadlineFor(a));
      }
      return PostStaged(a, "MPI_Iallgather", send, Bytes(a, a.count), a.recv, Bytes(a, a.count * p), nullptr, {},
                        [&](const void* s, void* recv, MPI_Request* r) {
                          return MPI_Iallgather(s, n, type, recv, n, type, comm_, r);
                        });
    }
    case CollectiveKind::kAllgatherv: {
      std::vector<int> counts, displs;
      if (!CountsAndDispls(a.counts, counts, displs))
        return TooLarge(a, std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0}));
      char* mine = static_cast<char*>(a.recv) + Bytes(a, static_cast<std::size_t>(displs[rank_]));
      const void* send = (a.send == nullptr || a.send == mine) ? MPI_IN_PLACE : a.send;
      const std::size_t total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
      if (meet && shm_->ReadsGather(SlotMeeting::LargestGatherBlock(a))) return ReadGather(a);
      if (meet) {
        const std::size_t most = Bytes(a, *std::max_element(a.counts.begin(), a.counts.end()));
        const bool via = ShmGathers(most);
        COMMKIT_RETURN_IF_ERROR(
            Meet(a, a.send != nullptr ? a.send : mine, via ? Bytes(a, a.counts[rank_]) : 0, 1, via ? most : 0));
        if (via) {
          shm_->Gather(a, algorithms::CountOffsets(a.counts, SizeOf(a.dtype)));
          return Status::Ok();
        }
      }
      if (UseP2p(a, total)) {
        if (send != MPI_IN_PLACE && a.counts[rank_] > 0) std::memcpy(mine, send, Bytes(a, a.counts[rank_]));
        Transport t(*this, a);
        return algorithms::Allgather(t, algorithms::Group(rank_, size_), a.recv,
                                     algorithms::CountOffsets(a.counts, SizeOf(a.dtype)),
                                     {CollectiveAlgorithm::kRing}, DeadlineFor(a));
      }
      return PostStaged(a, "MPI_Iallgatherv", send, Bytes(a, a.counts[rank_]), a.recv, Bytes(a, total), nullptr,
                        {&counts, &displs}, [&](const void* s, void* recv, MPI_Request* r) {
                          return MPI_Iallgatherv(s, counts[rank_], type, recv, counts.data(), displs.data(), type,
                                                 comm_, r);
                        });
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      if (meet && a.kind == CollectiveKind::kReduceScatter && a.send != nullptr && ShmFits(Bytes(a, a.count * p))) {
        // Even blocks through the slots: nothing to allocate per call.
        COMMKIT_RETURN_IF_ERROR(Meet(a, a.send, Bytes(a, a.count * p), premul ? a.op.scalar : 1));
        shm_->Reduce(a, Bytes(a, a.count * static_cast<std::size_t>(rank_)), a.count);
        return Status::Ok();
      }
      std::vector<std::size_t> sizes =
          a.kind == CollectiveKind::kReduceScatter ? std::vector<std::size_t>(p, a.count) : a.counts;
      std::vector<int> counts, displs;
      std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
      if (!CountsAndDispls(sizes, counts, displs)) return TooLarge(a, total);
      if (a.send == nullptr && total > 0)
        return Status::InvalidArgument(StrCat("mpi backend: ", ToString(a.kind), " needs a send buffer of ", total,
                                              " elements (the result is smaller than the input)"));
      if (meet) {
        const bool via = ShmFits(Bytes(a, total));
        COMMKIT_RETURN_IF_ERROR(Meet(a, a.send, via ? Bytes(a, total) : 0, premul ? a.op.scalar : 1));
        if (via) {
          shm_->Reduce(a, Bytes(a, static_cast<std::size_t>(displs[rank_])), sizes[rank_]);
          return Status::Ok();
        }
      }
      if (UseP2p(a, total)) {
        // The ring reduces in place: it works on a staged copy of the input (scaled for PREMUL_SUM)
        // and this rank's block is copied out.
        if (total == 0) return Status::Ok();
        if (size_ == 2 && !premul) {
          const std::size_t me = static_cast<std::size_t>(rank_), peer = 1 - me;
          const char* in = static_cast<const char*>(a.send);
          const char* peer_block = in + Bytes(a, static_cast<std::size_t>(displs[peer]));
          const char* out = static_cast<const char*>(a.recv);
          // The result may be written over this rank's own block of the input (in place), never over
          // the block still being sent.
          const bool apart = out == in + Bytes(a, static_cast<std::size_t>(displs[me])) ||
                             out + Bytes(a, sizes[me]) <= peer_block || out >= peer_block + Bytes(a, sizes[peer]);
          if (apart) {
            COMMKIT_RETURN_IF_ERROR(TwoRankReduceScatter(a, Bytes(a, static_cast<std::size_t>(displs[me])), sizes[me],
                                                         Bytes(a, static_cast<std::size_t>(displs[peer])), sizes[peer]));
            if (avg) DivideInPlace(a.dtype, a.recv, sizes[me], size_);
            return Status::Ok();
          }
        }
        p2p_stage_.assign(static_cast<const char*>(a.send), static_cast<const char*>(a.send) + Bytes(a, total));
        if (premul) ScaleInPlace(a.dtype, p2p_stage_.data(), total, a.op.scalar);
        const std::vector<std::size_t> off = algorithms::CountOffsets(sizes, SizeOf(a.dtype));
        Transport t(*this, a);
        Status st = algorithms::ReduceScatter(t, algorithms::Group(rank_, size_), p2p_stage_.data(), off, SizeOf(a.dtype),
                                              GetReduceFunction(a.dtype, BaseKind(a.op.kind)), {CollectiveAlgorithm::kRing},
                                              DeadlineFor(a), p2p_scratch_);
        if (st.ok() && sizes[rank_] > 0) std::memcpy(a.recv, p2p_stage_.data() + off[rank_], Bytes(a, sizes[rank_]));
        TrimP2pBuffers();
        COMMKIT_RETURN_IF_ERROR(st);
        if (avg) DivideInPlace(a.dtype, a.recv, sizes[rank_], size_);
        return Status::Ok();
      }
      const void* in = a.send;
      if (premul) {
        in = scaled(in, total);
      } else if (in == a.recv && total > 0) {
        // MPI forbids aliased send and receive buffers: reduce from a copy.
        scratch.assign(static_cast<const char*>(a.send), static_cast<const char*>(a.send) + Bytes(a, total));
        in = scratch.data();
      }
      COMMKIT_RETURN_IF_ERROR(PostStaged(a, "MPI_Ireduce_scatter", in, Bytes(a, total), a.recv,
                                         Bytes(a, sizes[rank_]), &scratch, {&counts, &displs},
                                         [&](const void* s, void* recv, MPI_Request* r) {
                                           return MPI_Ireduce_scatter(s, recv, counts.data(), type, op, comm_, r);
                                         }));
      if (avg) DivideInPlace(a.dtype, a.recv, sizes[rank_], size_);
      return Status::Ok();
    }
    case CollectiveKind::kAlltoall: {
      if (meet) COMMKIT_RETURN_IF_ERROR(Meet(a, nullptr, 0));
      if (a.count == 0) return Status::Ok();
      if (UseP2p(a, a.count * p)) {
        const std::vector<std::size_t> off = algorithms::EvenOffsets(a.count * p, size_, SizeOf(a.dtype));
        return P2pAlltoall(a, off, off, Bytes(a, a.count * p));
      }
      const void* in = a.send;
      if (in == nullptr || in == a.recv) {
        scratch.assign(static_cast<const char*>(a.recv), static_cast<const char*>(a.recv) + Bytes(a, a.count * p));
        in = scratch.data();
      }
      return PostStaged(a, "MPI_Ialltoall", in, Bytes(a, a.count * p), a.recv, Bytes(a, a.count * p), &scratch, {},
                        [&](const void* s, void* recv, MPI_Request* r) {
                          return MPI_Ialltoall(s, n, type, recv, n, type, comm_, r);
                        });
    }
    case CollectiveKind::kAlltoallv: {
      std::vector<int> sc, sd, rc, rd;
      std::size_t send_total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
      std::size_t recv_total = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), std::size_t{0});
      if (!CountsAndDispls(a.counts, sc, sd)) return TooLarge(a, send_total);
      if (!CountsAndDispls(a.recv_counts, rc, rd)) return TooLarge(a, recv_total);
      const void* in = a.send;
      if ((in == nullptr || in == a.recv) && send_total > recv_total)
        return Status::InvalidArgument(StrCat("mpi backend: in-place alltoallv sends ", send_total,
                                              " elements but the buffer holds ", recv_total));
      if (meet) COMMKIT_RETURN_IF_ERROR(Meet(a, nullptr, 0));
      if (UseP2p(a, std::max(send_total, recv_total)))
        return P2pAlltoall(a, algorithms::CountOffsets(a.counts, SizeOf(a.dtype)),
                           algorithms::CountOffsets(a.recv_counts, SizeOf(a.dtype)), Bytes(a, send_total));
      if (in == nullptr || in == a.recv) {
        scratch.assign(static_cast<const char*>(a.recv), static_cast<const char*>(a.recv) + Bytes(a, send_total));
        in = scratch.data();
      }
      return PostStaged(a, "MPI_Ialltoallv", in, Bytes(a, send_total), a.recv, Bytes(a, recv_total), &scratch,
                        {&sc, &sd, &rc, &rd}, [&](const void* s, void* recv, MPI_Request* r) {
                          return MPI_Ialltoallv(s, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type,
                                                comm_, r);
                        });
    }
    case CollectiveKind::kGather: {
      if (meet) COMMKIT_RETURN_IF_ERROR(Meet(a, nullptr, 0));
      if (a.count == 0) return Status::Ok();
      const bool root = rank_ == a.root;
      char* slot = root ? static_cast<char*>(a.recv) + Bytes(a, a.count * static_cast<std::size_t>(rank_)) : nullptr;
      const void* send = (root && a.send == slot) ? MPI_IN_PLACE : a.send;
      return PostStaged(a, "MPI_Igather", send, Bytes(a, a.count), root ? a.recv : nullptr, Bytes(a, a.count * p),
                        nullptr, {}, [&](const void* s, void* recv, MPI_Request* r) {
                          return MPI_Igather(s, n, type, recv, n, type, a.root, comm_, r);
                        });
    }
    case CollectiveKind::kScatter: {
      if (meet) COMMKIT_RETURN_IF_ERROR(Meet(a, nullptr, 0));
      if (a.count == 0) return Status::Ok();
      const bool root = rank_ == a.root;
      const char* slot = root ? static_cast<const char*>(a.send) + Bytes(a, a.count * static_cast<std::size_t>(rank_))
                              : nullptr;
      void* recv = (root && a.recv == slot) ? MPI_IN_PLACE : a.recv;
      return PostStaged(a, "MPI_Iscatter", root ? a.send : nullptr, Bytes(a, a.count * p), recv, Bytes(a, a.count),
                        nullptr, {}, [&](const void* s, void* out, MPI_Request* r) {
                          return MPI_Iscatter(s, n, type, out, n, type, a.root, comm_, r);
                        });
    }
    case CollectiveKind::kBarrier:
      // Every rank has published this call: that is the barrier.
      if (meet) return Meet(a, nullptr, 0);
      if (p2p_comm_ != MPI_COMM_NULL) {
        Transport t(*this, a);
        return algorithms::Barrier(t, algorithms::Group(rank_, size_), {CollectiveAlgorithm::kDissemination},
                                   DeadlineFor(a));
      }
      return PostStaged(a, "MPI_Ibarrier", nullptr, 0, nullptr, 0, nullptr, {},
                        [&](const void*, void*, MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv: {
      if (!FitsInt(a.count)) return TooLarge(a, a.count);
      if (a.tag > Rt().tag_ub)
        return Status::InvalidArgument(StrCat("mpi backend: tag ", a.tag, " exceeds MPI_TAG_UB (", Rt().tag_ub, ")"));
      if (a.kind == CollectiveKind::kSend)
        return Post(a, "MPI_Isend",
                    [&](MPI_Request* r) { return MPI_Isend(a.send, n, type, a.peer, a.tag, comm_, r); });
      return Post(a, "MPI_Irecv", [&](MPI_Request* r) { return MPI_Irecv(a.recv, n, type, a.peer, a.tag, comm_, r); });
    }
  }
  return Status::Internal("mpi backend: unknown collective");
}

}  // namespace commkit::comm::mpi
