#include "host_remote.h"

#include <numeric>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/strings.h"

namespace commkit::comm::host {

namespace {

namespace alg = algorithms;

// The algorithm layer's transport on UCX tagged messages (channel 0, the collective's sequence). The
// tag's step is the message's number between the two ranks in this direction, which gives the layer's
// in-order matching; zero-byte messages go as one byte so that they still synchronise (UCX skips
// empty ops).
class UcxAlgorithmTransport final : public alg::Transport {
 public:
  UcxAlgorithmTransport(UcxTransport& t, std::uint64_t sequence)
      : t_(t), sequence_(sequence), sent_(static_cast<std::size_t>(t.size()), 0),
        received_(static_cast<std::size_t>(t.size()), 0) {}

  Status Exchange(std::span<alg::Message> messages, alg::Deadline deadline) override {
    ops_.clear();
    empties_.assign(messages.size(), 0);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const alg::Message& msg = messages[i];
      UcxTransport::Op op;
      op.peer = msg.peer;
      op.bytes = msg.bytes == 0 ? 1 : msg.bytes;
      const auto peer = static_cast<std::size_t>(msg.peer);
      if (msg.send) {
        op.send = true;
        op.buf = msg.bytes == 0 ? &empties_[i] : msg.data;
        op.step = sent_[peer]++;
      } else {
        op.out = msg.bytes == 0 ? &empties_[i] : msg.out;
        op.step = received_[peer]++;
      }
      ops_.push_back(op);
    }
    return t_.Run(ops_, 0, sequence_, 0, deadline);
  }

 private:
  UcxTransport& t_;
  std::uint64_t sequence_;
  std::vector<std::uint32_t> sent_, received_;  // per peer
  std::vector<UcxTransport::Op> ops_;
  std::vector<char> empties_;
};

alg::AlgorithmChoice Only(CollectiveAlgorithm a) {
  alg::AlgorithmChoice c;
  c.algorithm = a;
  return c;
}

// An all-reduce between hosts moves whole ring blocks per message: UCX moves large messages without
// staging, and a piece per step would add a round trip each.
alg::AlgorithmChoice WholeBlocks(CollectiveAlgorithm a) {
  alg::AlgorithmChoice c = Only(a);
  c.segment_bytes = 0;
  return c;
}

}  // namespace

Status RemoteCollectives::Allreduce(CollectiveAlgorithm algorithm, const CollectiveArgs& a, void* buf,
                                    std::size_t count, ReduceKind kind, const std::vector<int>& ranks, Deadline d) {
  UcxAlgorithmTransport t(t_, a.sequence);
  alg::AllreduceArgs args;
  args.buf = buf;
  args.count = count;
  args.elem_size = SizeOf(a.dtype);
  args.reduce = GetReduceFunction(a.dtype, kind);
  return alg::Allreduce(t, alg::Group(ranks, t_.rank()), args, WholeBlocks(algorithm), d, scratch_);
}

Status RemoteCollectives::Run(const CollectiveArgs& a, Deadline d, CollectiveAlgorithm allreduce) {
  const int p = t_.size(), r = t_.rank();
  const std::size_t e = SizeOf(a.dtype), n = a.count;
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  const alg::Group all(r, p);
  UcxAlgorithmTransport t(t_, a.sequence);
  const ReduceKind plain = a.op.kind == ReduceKind::kAvg || a.op.kind == ReduceKind::kPreMulSum ? ReduceKind::kSum : a.op.kind;
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduce: {
      // Reduce runs as an all-reduce whose result only the root keeps.
      std::uint8_t* out = recv;
      if (a.kind == CollectiveKind::kReduce && r != a.root) {
        staging_.resize(n * e);
        out = staging_.data();
      }
      const auto* in = send ? send : recv;
      alg::CopyBytes(out, in, n * e);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, out, n, a.op.scalar);
      alg::AllreduceArgs args;
      args.buf = out;
      args.count = n;
      args.elem_size = e;
      args.reduce = GetReduceFunction(a.dtype, plain);
      COMMKIT_RETURN_IF_ERROR(alg::Allreduce(t, all, args, WholeBlocks(allreduce), d, scratch_));
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, out, n, p);
      return Status::Ok();
    }
    case CollectiveKind::kBroadcast:
      if (n == 0) return Status::Ok();
      return alg::Broadcast(t, all, a.root, a.recv, n * e, Only(CollectiveAlgorithm::kBinomialTree), d);
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAllgatherv: {
      auto off = a.kind == CollectiveKind::kAllgatherv ? alg::CountOffsets(a.counts, e) : alg::EvenOffsets(n * p, p, e);
      if (send) alg::CopyBytes(recv + off[r], send, off[r + 1] - off[r]);
      return alg::Allgather(t, all, recv, off, Only(CollectiveAlgorithm::kRing), d);
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      auto off = a.kind == CollectiveKind::kReduceScatterV ? alg::CountOffsets(a.counts, e) : alg::EvenOffsets(n * p, p, e);
      std::vector<std::uint8_t> work(send, send + off[p]);
      if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, work.data(), off[p] / e, a.op.scalar);
      COMMKIT_RETURN_IF_ERROR(alg::ReduceScatter(t, all, work.data(), off, e, GetReduceFunction(a.dtype, plain),
                                                 Only(CollectiveAlgorithm::kRing), d, scratch_));
      alg::CopyBytes(recv, work.data() + off[r], off[r + 1] - off[r]);
      if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, recv, (off[r + 1] - off[r]) / e, p);
      return Status::Ok();
    }
    case CollectiveKind::kAlltoall:
    case CollectiveKind::kAlltoallv: {
      std::vector<std::size_t> even(static_cast<std::size_t>(p), n);
      const bool v = a.kind == CollectiveKind::kAlltoallv;
      auto soff = alg::CountOffsets(v ? a.counts : even, e), roff = alg::CountOffsets(v ? a.recv_counts : even, e);
      if (send == nullptr || send == recv) {  // in place: stage the input
        staging_.assign(recv, recv + soff[p]);
        send = staging_.data();
      }
      return alg::Alltoall(t, all, send, soff, recv, roff, Only(CollectiveAlgorithm::kPairwise), d);
    }
    case CollectiveKind::kGather:
      return alg::Gather(t, all, a.root, send, recv, n * e, Only(CollectiveAlgorithm::kDirect), d);
    case CollectiveKind::kScatter:
      return alg::Scatter(t, all, a.root, send, recv, n * e, Only(CollectiveAlgorithm::kDirect), d);
    case CollectiveKind::kBarrier:
      return alg::Barrier(t, all, Only(CollectiveAlgorithm::kDissemination), d);
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv: {
      // The user's 32-bit tag spreads over the sequence (24 bits) and step (8 of 16 bits) fields.
      auto tag = static_cast<std::uint32_t>(a.tag);
      UcxTransport::Op op;
      op.peer = a.peer;
      op.bytes = n * e;
      if (a.kind == CollectiveKind::kSend) {
        op.send = true;
        op.buf = send;
      } else {
        op.out = recv;
      }
      std::vector<UcxTransport::Op> ops{op};
      return t_.Run(ops, 1, tag & 0xFFFFFF, tag >> 24, d);
    }
  }
  return Status::Internal("host backend: unexpected collective");
}

}  // namespace commkit::comm::host
