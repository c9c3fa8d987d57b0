// The mpi backend's meeting in shared-memory slots (mpi_shm.h) and the collectives whose data goes
// through them: every rank copies its input into its slot, publishes, and computes its result from
// every rank's slot in rank order (so every rank computes the same bits).
#include "commkit/comm/reduce_kernels.h"
#include "mpi_backend_impl.h"

namespace commkit::comm::mpi {

Status MpiBackend::Meet(const CollectiveArgs& a, const void* data, std::size_t bytes, double scale) {
  const std::uint64_t seq = ++shm_seq_;
  const int gen = Generation();
  ShmSlots::Header& mine = shm_->header(gen, rank_);
  if (bytes > 0) {
    std::memcpy(shm_->data(gen, rank_), data, bytes);
    if (scale != 1) ScaleInPlace(a.dtype, shm_->data(gen, rank_), bytes / SizeOf(a.dtype), scale);
  }
  mine.fingerprint = a.fingerprint;
  mine.bytes = bytes;
  ShmSlots::StoreSeq(mine, seq);
  // Ranks are polled in turn from the next one; a rank seen ready stays ready (it cannot publish the
  // next call before this rank has).
  Backoff backoff(shm_spin_);
  const Clock::time_point deadline = DeadlineFor(a);
  // A rank that stops waiting (timeout, abort) says so in its slot: a late rank then fails instead of
  // completing a call the others have given up on, and ranks still waiting fail at once.
  auto give_up = [&](Status s) {
    ShmSlots::StoreSeq(mine, ShmSlots::kGaveUp);
    MarkUnusable(s);
    return s;
  };
  int waiting = (rank_ + 1) % size_;
  while (waiting != rank_) {
    const std::uint64_t theirs = ShmSlots::LoadSeq(shm_->header(gen, waiting));
    if (theirs == seq) {
      waiting = (waiting + 1) % size_;
      continue;
    }
    // Any rank that gave up, not only the one waited for (which may be the one that never comes).
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || ShmSlots::LoadSeq(shm_->header(gen, q)) != ShmSlots::kGaveUp) continue;
      return give_up(Status::Timeout(StrCat("mpi backend: ", ToString(a.kind), " #", a.sequence, " on group ", group_,
                                            " (rank ", rank_, "/", size_, "): rank ", q,
                                            " gave up on it (timed out or aborted) before every rank arrived")));
    }
    if (aborted_.load())
      return give_up(Status::Aborted(StrCat("mpi backend: ", ToString(a.kind), " #", a.sequence, " aborted")));
    if (!backoff.Pause(deadline)) return give_up(TimedOut(a));
  }
  for (int q = 0; q < size_; ++q) {
    if (shm_->header(gen, q).fingerprint == a.fingerprint) continue;
    return Status::Mismatch(StrCat("mpi backend: rank ", q, " issued a different collective than rank ", rank_, " at ",
                                   ToString(a.kind), " #", a.sequence, " (seen in the shared-memory slots)"));
  }
  return Status::Ok();
}

// The whole input is every rank's block.
Status MpiBackend::ShmAllreduce(const CollectiveArgs& a) { return ShmReduceScatter(a, 0, a.count); }

Status MpiBackend::ShmAllgather(const CollectiveArgs& a, std::span<const std::size_t> offsets) {
  const int gen = Generation();
  char* out = static_cast<char*>(a.recv);
  const std::size_t block = Bytes(a, a.count);
  for (int q = 0; q < size_; ++q) {
    const std::size_t off = offsets.empty() ? block * static_cast<std::size_t>(q) : offsets[q];
    const std::size_t bytes = offsets.empty() ? block : offsets[q + 1] - offsets[q];
    if (bytes > 0) std::memcpy(out + off, shm_->data(gen, q), bytes);
  }
  return Status::Ok();
}

Status MpiBackend::ShmReduceScatter(const CollectiveArgs& a, std::size_t off, std::size_t n) {
  const int gen = Generation();
  if (n == 0) return Status::Ok();
  const ReduceFunction reduce = GetReduceFunction(a.dtype, BaseKind(a.op.kind));
  // (slot 0 op slot 1) op slot 2 ...: the same order, so the same bits, on every rank.
  reduce(a.recv, shm_->data(gen, 0) + off, shm_->data(gen, 1) + off, n);
  for (int q = 2; q < size_; ++q) reduce(a.recv, a.recv, shm_->data(gen, q) + off, n);
  if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, n, size_);
  return Status::Ok();
}

Status MpiBackend::ShmBroadcast(const CollectiveArgs& a) {
  if (rank_ != a.root) std::memcpy(a.recv, shm_->data(Generation(), a.root), Bytes(a, a.count));
  return Status::Ok();
}

}  // namespace commkit::comm::mpi
