// The gloo backend's collectives: every collective of the API on Gloo's algorithms over a connected
// full mesh (gloo_connect.cc makes it), after a meeting in shared memory on one node that also
// carries the small ones (Meet).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <numeric>
#include <optional>

#include "commkit/comm/gloo/gloo_backend.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "gloo_hd_cache.h"
#include "gloo_internal.h"

namespace commkit::comm::gloo {

namespace {

using std::chrono::milliseconds;

// Dispatches on element size: Gloo's templates only use sizeof(T); commkit supplies the reductions.
template <typename F>
void BySize(DataType dtype, F&& f) {
  switch (SizeOf(dtype)) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    default: f(std::uint64_t{}); break;
  }
}

// Halving-doubling template instances kept per backend (gloo_hd_cache.h): the shapes of a training
// step's buckets plus the mismatch check's 16 bytes fit; each entry holds about twice its size.
constexpr std::size_t kHdCacheEntries = 16;
constexpr std::size_t kHdCacheBytes = std::size_t{64} << 20;

// Reduce-scatter's ring slots (with the call's tag), apart from point-to-point (0xC0) and the
// connect-time priming (0xC1).
constexpr std::uint64_t kReduceScatterSlot = 0xC3ull << 56;

// The closing barrier (below): after every call of the group, so no call's tag (its sequence number
// below 2^31) is still in use.
constexpr std::uint32_t kCloseTag = 0x7FFFFFFF;
// How long a closing group waits for its peers at most. Peers that destroy the same group are
// microseconds to milliseconds apart; ranks that destroy their groups in different orders meet
// nobody and go on after this.
constexpr milliseconds kCloseSettleLimit{5000};

class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<::gloo::rendezvous::Context> context,
              std::shared_ptr<::gloo::rendezvous::Context> hd_context, std::shared_ptr<::gloo::transport::Device> device,
              int rank, int size, tune::Table table, std::chrono::milliseconds pair_timeout,
              std::size_t hd_busy_max_bytes, std::unique_ptr<SlotMeeting> meeting)
      : context_(std::move(context)),
        hd_context_(std::move(hd_context)),
        device_(std::move(device)),
        rank_(rank),
        size_(size),
        table_(std::move(table)),
        pair_timeout_(pair_timeout),
        hd_busy_max_bytes_(hd_busy_max_bytes),
        meeting_(std::move(meeting)) {
    if (hd_context_ != nullptr)
      hd_cache_ = std::make_unique<HalvingDoublingCache>(hd_context_, kHdCacheEntries, kHdCacheBytes);
  }

  // Gloo's halving-doubling template (run()) does not wait for its all-gather sends: a rank returns once
  // its peers' notifications have arrived, while its own last notification may still be queued on the
  // pair. Closing the pairs then (a rank destroying its group right after its last all-reduce, as a
  // training script's end does) failed a peer still inside that call with "Connection closed by peer",
  // once in 180 teardowns at 4 ranks (docs/gloo-algorithms.md). So a group whose last collective ran
  // halving-doubling first meets its peers in a barrier on the main mesh: a peer arrives there only
  // after its own last call. Bounded by kCloseSettleLimit, and skipped after an abort or a failed call,
  // where peers may never arrive.
  ~GlooBackend() override {
    if (!settle_on_close_ || broken_.load(std::memory_order_relaxed) || size_ < 2) return;
    try {
      ::gloo::BarrierOptions opts(context_);
      opts.setTag(kCloseTag);
      opts.setTimeout(std::min(pair_timeout_, kCloseSettleLimit));
      ::gloo::barrier(opts);
    } catch (const std::exception& e) {
      COMMKIT_LOG_DEBUG("gloo backend (rank ", rank_, "/", size_, "): closing barrier not met (", e.what(),
                        "); closing anyway");
    }
  }

  std::string_view Name() const override { return "gloo"; }
  // Gloo's unbound-buffer send/recv are safe next to collectives on other threads (slots differ).
  bool ConcurrentPointToPoint() const override { return true; }
  // On one node every collective meets first (Meet), comparing fingerprints.
  bool ChecksMismatch() const override { return meeting_ != nullptr; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    return memory == MemoryKind::kHost && IsDefinedReduction(kind, dtype, op);
  }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    Status s;
    // Send/recv run on their own threads (ConcurrentPointToPoint), next to a collective: they carry
    // their timeout per call and touch nothing the collectives keep (scratch, the algorithm cache).
    const bool p2p = a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv;
    try {
      if (p2p) {
        s = Dispatch(a);
      } else {
        context_->setTimeout(a.timeout);
        settle_on_close_ = false;
        bool done = false;  // the meeting was the whole call
        if (meeting_ != nullptr) {
          s = Meet(a, done);
          // Every rank saw the same difference before any data moved: the group stays usable.
          if (s.code() == StatusCode::kMismatch) return CompletedWork(std::move(s), a.sequence);
          meeting_->Close();
          // The next meeting may spin only when no Gloo message of this call can still need this
          // rank's event-loop thread (see ConnectMeeting).
          meeting_->set_busy_wait(s.ok() && done);
        }
        if (s.ok() && !done) s = Dispatch(a);
        ReleaseLargeScratch();
      }
    } catch (const std::exception& e) {
      s = FromGloo(e, ToString(a.kind));
    }
    if (!s.ok()) broken_.store(true, std::memory_order_relaxed);
    return CompletedWork(std::move(s), a.sequence);
  }

  Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int) override {
    if (color < 0) return std::unique_ptr<Backend>();  // this rank joins no sub-group
    return CreateGlooBackend(context);
  }

  void Abort(std::string_view reason) override {
    broken_.store(true, std::memory_order_relaxed);
    if (meeting_ != nullptr) meeting_->Abort(reason);  // a rank waiting in a meeting returns at once
    COMMKIT_LOG_WARN("gloo backend: abort requested (", reason, "); pending operations end at their timeout");
  }

 private:
  std::size_t Bytes(const CollectiveArgs& a, std::size_t elems) const { return elems * SizeOf(a.dtype); }

  // One round of the shared-memory slots: post this call's fingerprint, wait for every rank's and
  // compare them. A mismatch then fails on every rank before any data moves, without the process
  // group's separate 16-byte all-reduce, which cost a second Gloo call per collective (80-300 us at 2
  // ranks here, as much as a small all-reduce itself; docs/gloo-algorithms.md). A rank whose wait
  // fails tells the others through the transport, so they fail at once instead of at their timeout.
  // Inputs that fit a slot travel along, and the call ends here (`done`): an all-reduce the selection
  // table gives to kFlat, an all-gather or broadcast up to SlotMeeting::kGatherMaxBytes per rank, a
  // larger broadcast or all-gather(v) where the ranks may read each other (SlotMeeting::ReadsBroadcast,
  // ReadsGather: each rank reads the announced buffers itself), and a barrier.
  Status Meet(const CollectiveArgs& a, bool& done) {
    const SlotMeeting::Deadline deadline = ShmTransport::Clock::now() + a.timeout;
    const std::size_t bytes = Bytes(a, a.count);
    const void* data = nullptr;
    std::size_t publish = 0, most = 0;
    // A broadcast beyond the slots is read from the root's buffer, announced in the meeting.
    bool direct = false;
    // An all-gather beyond the slots is read from every rank's input, announced the same way.
    bool gather = false;
    const void* input = nullptr;
    PeerBuffer announce;
    double scale = 1;
    switch (a.kind) {
      case CollectiveKind::kBarrier: done = true; break;
      case CollectiveKind::kAllreduce:
        done = table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, bytes).algorithm == CollectiveAlgorithm::kFlat &&
               meeting_->Fits(bytes);
        data = a.send != nullptr ? a.send : a.recv;
        publish = done ? bytes : 0;
        if (a.op.kind == ReduceKind::kPreMulSum) scale = a.op.scalar;
        break;
      case CollectiveKind::kAllgather:
      case CollectiveKind::kAllgatherv: {
        // In place the input is this rank's block, or (send == recv) the buffer's start.
        if (meeting_->ReadsGather(SlotMeeting::LargestGatherBlock(a))) {
          gather = true;
          SlotMeeting::GatherOffsets(a, size_, offsets_);
          input = SlotMeeting::GatherInput(a, offsets_, rank_);
          announce = SlotMeeting::Announce(input);
          data = &announce;
          publish = most = sizeof announce;
        } else if (a.kind == CollectiveKind::kAllgather) {
          done = meeting_->Gathers(bytes);
          data = a.send != nullptr ? a.send : static_cast<const char*>(a.recv) + bytes * static_cast<std::size_t>(rank_);
          publish = done ? bytes : 0;
        }
        done = done || gather;
        break;
      }
      case CollectiveKind::kBroadcast:
        if (meeting_->ReadsBroadcast(bytes)) {
          direct = true;
          announce = SlotMeeting::Announce(a.recv);  // a getpid() call: only where it is used
          data = &announce;
          publish = most = sizeof announce;
        } else {
          data = a.recv;
          publish = meeting_->Gathers(bytes) && rank_ == a.root ? bytes : 0;
          most = meeting_->Gathers(bytes) ? bytes : 0;
        }
        done = direct || meeting_->Gathers(bytes);
        break;
      default: break;
    }
    Status s = meeting_->Meet(a, data, publish, scale, most, deadline);
    if (s.ok() && (direct || gather)) {
      s = direct ? meeting_->ReadBroadcast(a, deadline)
                 : meeting_->ReadGather(a, input, offsets_, deadline);
      if (s.ok()) tune::NoteRun("gloo", CollectiveAlgorithm::kSingleCopy);
    }
    if (!s.ok()) {
      done = false;
      return s.WithContext(StrCat(ToString(a.kind), " #", a.sequence, " (the meeting in shared memory)"));
    }
    if (done && !direct && !gather && a.kind != CollectiveKind::kBarrier) {
      if (a.kind == CollectiveKind::kAllreduce) meeting_->Reduce(a, 0, a.count);
      if (a.kind == CollectiveKind::kAllgather) meeting_->Gather(a, {});
      if (a.kind == CollectiveKind::kBroadcast) meeting_->Broadcast(a);
      tune::NoteRun("gloo", CollectiveAlgorithm::kFlat);
    }
    return s;
  }

  // Staging memory reused across calls (collectives run one at a time), as a caller of Gloo keeps its
  // buffers: a repeated large reduce-scatter must not allocate and fault in its scratch every call.
  // ReleaseLargeScratch gives back only what one call needed beyond kKeepScratchBytes.
  static constexpr std::size_t kKeepScratchBytes = std::size_t{256} << 20;
  char* Scratch(int i, std::size_t bytes) {
    std::vector<char>& v = scratch_[i];
    if (v.size() < bytes) v.resize(bytes);
    return v.data();
  }
  void ReleaseLargeScratch() {
    for (std::vector<char>& v : scratch_)
      if (v.size() > kKeepScratchBytes) std::vector<char>().swap(v);
  }
  // `in` (bytes long), or a staged copy of it when it overlaps the output (Gloo reads the input while
  // writing the output).
  const void* StageIfInside(const void* in, std::size_t bytes, const void* out, std::size_t out_bytes) {
    const char* i = static_cast<const char*>(in);
    const char* o = static_cast<const char*>(out);
    if (bytes == 0 || i + bytes <= o || i >= o + out_bytes) return in;
    char* copy = Scratch(1, bytes);
    std::memcpy(copy, in, bytes);
    return copy;
  }
  std::uint32_t Tag(const CollectiveArgs& a) const { return static_cast<std::uint32_t>(a.sequence & 0x7FFFFFFF); }

  // The algorithm for one all-reduce through Gloo: the selection table's choice, except that the old
  // halving-doubling template falls back to the new-style ring where it cannot honor the call: its
  // count is an int, and its waits use the pairs' timeout fixed at connect (the group's default), so
  // a per-op timeout override goes to the new API, which takes the timeout per call. Busy-polling
  // pairs take no call larger than their socket buffers (connect made sure the table sends none).
  CollectiveAlgorithm AlgorithmFor(const CollectiveArgs& a, std::size_t count) const {
    const std::size_t bytes = Bytes(a, count);
    CollectiveAlgorithm selected = table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, bytes).algorithm;
    // Flat where the call could not meet in the slots (no meeting, or larger than a slot): the
    // table's choice below 1 MiB otherwise.
    if (selected == CollectiveAlgorithm::kFlat) selected = CollectiveAlgorithm::kHalvingDoubling;
    CollectiveAlgorithm algo = GlooAllreduceAlgorithm(selected).value_or(CollectiveAlgorithm::kRing);
    if (algo == CollectiveAlgorithm::kHalvingDoubling &&
        (count > static_cast<std::size_t>(INT_MAX) || a.timeout != pair_timeout_ || hd_cache_ == nullptr ||
         (hd_busy_max_bytes_ > 0 && bytes > hd_busy_max_bytes_)))
      algo = CollectiveAlgorithm::kRing;
    return algo;
  }

  // All-reduce of `count` elements from `in` into `out` (in == out: in place), AVG / PREMUL_SUM
  // handled around a SUM. Out of place, Gloo reads `in` directly (no staging copy), as a caller of
  // Gloo would.
  void Allreduce(const CollectiveArgs& a, const void* in, void* out, std::size_t count) {
    if (count == 0) return;
    if (a.op.kind == ReduceKind::kPreMulSum) {
      if (in != out) std::memcpy(out, in, Bytes(a, count));
      ScaleInPlace(a.dtype, out, count, a.op.scalar);
      in = out;
    }
    ReduceFunction fn = GetReduceFunction(a.dtype, a.op.kind);
    CollectiveAlgorithm algo = AlgorithmFor(a, count);
    if (algo != last_algorithm_) {  // one debug line per change, not per call
      COMMKIT_LOG_DEBUG("gloo all-reduce: ", ToString(algo), " from ", Bytes(a, count), " bytes at ", size_, " ranks (",
                        table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, Bytes(a, count)).why, ")");
      last_algorithm_ = algo;
    }
    tune::NoteRun("gloo", algo);
    if (algo == CollectiveAlgorithm::kHalvingDoubling) {
      hd_cache_->Allreduce(in, out, SizeOf(a.dtype), count, fn);
      settle_on_close_ = true;
    } else {
      ::gloo::AllreduceOptions opts(context_);
      opts.setTag(Tag(a));
      opts.setTimeout(a.timeout);
      opts.setAlgorithm(algo == CollectiveAlgorithm::kBcube ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                                                            : ::gloo::AllreduceOptions::Algorithm::RING);
      BySize(a.dtype, [&](auto t) {
        using T = decltype(t);
        if (in != out) opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
        opts.setOutput(static_cast<T*>(out), count);
      });
      opts.setReduceFunction(::gloo::AllreduceOptions::Func(fn));
      ::gloo::allreduce(opts);
    }
    if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, out, count, size_);
  }

  Status Dispatch(const CollectiveArgs& a) {
    const std::size_t p = static_cast<std::size_t>(size_);
    switch (a.kind) {
      case CollectiveKind::kAllreduce: {
        Allreduce(a, a.send ? a.send : a.recv, a.recv, a.count);
        return Status::Ok();
      }
      case CollectiveKind::kBroadcast: {
        if (a.count == 0) return Status::Ok();
        ::gloo::BroadcastOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setOutput(static_cast<T*>(a.recv), a.count);
        });
        ::gloo::broadcast(opts);
        return Status::Ok();
      }
      case CollectiveKind::kReduce: {
        if (a.count == 0) return Status::Ok();
        // Gloo's reduce only reads its input, and writes its output on every rank: a non-root's goes
        // to scratch (its receive buffer stays untouched). No AVG/PREMUL in Gloo: PREMUL reduces a
        // scaled copy as SUM, AVG divides the root's result.
        const void* in = a.send ? a.send : a.recv;
        if (a.op.kind == ReduceKind::kPreMulSum) {
          char* scaled = Scratch(0, Bytes(a, a.count));
          std::memcpy(scaled, in, Bytes(a, a.count));
          ScaleInPlace(a.dtype, scaled, a.count, a.op.scalar);
          in = scaled;
        }
        void* out = rank_ == a.root ? a.recv : Scratch(1, Bytes(a, a.count));
        ::gloo::ReduceOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          if (in != out) opts.setInput(const_cast<T*>(static_cast<const T*>(in)), a.count);
          opts.setOutput(static_cast<T*>(out), a.count);
        });
        opts.setReduceFunction(::gloo::ReduceOptions::Func(GetReduceFunction(a.dtype, a.op.kind)));
        ::gloo::reduce(opts);
        if (rank_ == a.root && a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, a.count, size_);
        return Status::Ok();
      }
      case CollectiveKind::kAllgather: {
        if (a.count == 0) return Status::Ok();
        // Gloo's allgather reads its input while writing the output: an input inside the output (in
        // place) is staged.
        const void* in = a.send;
        if (a.send == nullptr || a.send == a.recv) in = static_cast<char*>(a.recv) + Bytes(a, a.count * rank_);
        in = StageIfInside(in, Bytes(a, a.count), a.recv, Bytes(a, a.count * p));
        ::gloo::AllgatherOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(in)), a.count);
          opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        ::gloo::allgather(opts);
        return Status::Ok();
      }
      case CollectiveKind::kAllgatherv: {
        std::size_t total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        if (total == 0) return Status::Ok();
        std::size_t offset = std::accumulate(a.counts.begin(), a.counts.begin() + rank_, std::size_t{0});
        const void* in = a.send ? a.send : static_cast<char*>(a.recv) + Bytes(a, offset);
        in = StageIfInside(in, Bytes(a, a.counts[rank_]), a.recv, Bytes(a, total));
        std::vector<size_t> counts(a.counts.begin(), a.counts.end());
        ::gloo::AllgathervOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(in)), a.counts[rank_]);
          opts.setOutput(static_cast<T*>(a.recv), counts);
        });
        ::gloo::allgatherv(opts);
        return Status::Ok();
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kReduceScatterV: {
        if (a.kind == CollectiveKind::kReduceScatter) {
          rs_counts_.assign(p, a.count);
        } else {
          rs_counts_.assign(a.counts.begin(), a.counts.end());
        }
        const std::size_t total = std::accumulate(rs_counts_.begin(), rs_counts_.end(), std::size_t{0});
        const std::size_t offset = std::accumulate(rs_counts_.begin(), rs_counts_.begin() + rank_, std::size_t{0});
        const std::size_t mine = rs_counts_[rank_];
        if (total == 0) return Status::Ok();
        // Where the all-reduce table picks halving-doubling for the whole input, its kept template
        // beats the ring's p-1 round trips over unbound buffers (2 ranks, up to 1 MiB: 0.6-1.2 ms
        // against 2-7 ms per call, docs/gloo-algorithms.md): all-reduce into scratch, keep this rank's
        // block.
        if (AlgorithmFor(a, total) == CollectiveAlgorithm::kHalvingDoubling) {
          char* full = Scratch(0, Bytes(a, total));
          Allreduce(a, a.send, full, total);
          if (mine) std::memcpy(a.recv, full + Bytes(a, offset), Bytes(a, mine));
          return Status::Ok();
        }
        // Otherwise a ring over unbound buffers in a copy of the input (the input stays untouched;
        // recv may lie inside it), AVG / PREMUL_SUM around a SUM.
        char* work = Scratch(0, Bytes(a, total));
        std::memcpy(work, a.send, Bytes(a, total));
        if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, work, total, a.op.scalar);
        const std::size_t largest = *std::max_element(rs_counts_.begin(), rs_counts_.end());
        char* tmp = Scratch(1, Bytes(a, std::max<std::size_t>(largest, 1)));
        RingReduceScatter(*context_, work, tmp, rs_counts_, SizeOf(a.dtype), GetReduceFunction(a.dtype, a.op.kind),
                          kReduceScatterSlot | Tag(a), a.timeout);
        if (mine) std::memcpy(a.recv, work + Bytes(a, offset), Bytes(a, mine));
        if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, mine, size_);
        return Status::Ok();
      }
      case CollectiveKind::kAlltoall: {
        if (a.count == 0) return Status::Ok();
        // In place the output overwrites the input: staged.
        const void* in = a.send ? a.send : a.recv;
        in = StageIfInside(in, Bytes(a, a.count * p), a.recv, Bytes(a, a.count * p));
        ::gloo::AlltoallOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(in)), a.count * p);
          opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        ::gloo::alltoall(opts);
        return Status::Ok();
      }
      case CollectiveKind::kAlltoallv: {
        std::size_t in_total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        std::size_t out_total = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), std::size_t{0});
        // In place (send == nullptr or send == recv): the input is the start of the receive buffer
        // (ValidateArgs checked that it holds in_total elements); staged, as the output overwrites it.
        const void* in = a.send != nullptr ? a.send : a.recv;
        if (a.recv != nullptr) in = StageIfInside(in, Bytes(a, in_total), a.recv, Bytes(a, out_total));
        std::vector<int64_t> in_counts(a.counts.begin(), a.counts.end());
        std::vector<int64_t> out_counts(a.recv_counts.begin(), a.recv_counts.end());
        // Gloo wants a buffer even for nothing to send or receive.
        void* dummy = Scratch(0, 8);
        ::gloo::AlltoallvOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(in_total == 0 || in == nullptr ? static_cast<T*>(dummy) : const_cast<T*>(static_cast<const T*>(in)),
                        in_counts);
          opts.setOutput(a.recv ? static_cast<T*>(a.recv) : static_cast<T*>(dummy), out_counts);
        });
        ::gloo::alltoallv(opts);
        return Status::Ok();
      }
      case CollectiveKind::kGather: {
        if (a.count == 0) return Status::Ok();
        ::gloo::GatherOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(a.send)), a.count);
          if (rank_ == a.root) opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        ::gloo::gather(opts);
        return Status::Ok();
      }
      case CollectiveKind::kScatter: {
        if (a.count == 0) return Status::Ok();
        ::gloo::ScatterOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        std::vector<void*> inputs;
        if (rank_ == a.root)
          for (std::size_t r = 0; r < p; ++r)
            inputs.push_back(const_cast<char*>(static_cast<const char*>(a.send)) + Bytes(a, a.count * r));
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          if (rank_ == a.root) {
            std::vector<T*> typed;
            for (void* v : inputs) typed.push_back(static_cast<T*>(v));
            opts.setInputs(typed, a.count);
          }
          opts.setOutput(static_cast<T*>(a.recv), a.count);
        });
        ::gloo::scatter(opts);
        return Status::Ok();
      }
      case CollectiveKind::kBarrier: {
        ::gloo::BarrierOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        ::gloo::barrier(opts);
        return Status::Ok();
      }
      case CollectiveKind::kSend:
      case CollectiveKind::kRecv: {
        if (a.count == 0) return Status::Ok();
        // Point-to-point slots live in their own range so they never meet a collective's.
        std::uint64_t slot = (0xC0ull << 56) | static_cast<std::uint32_t>(a.tag);
        if (a.kind == CollectiveKind::kSend) {
          auto buf = context_->createUnboundBuffer(const_cast<void*>(a.send), Bytes(a, a.count));
          buf->send(a.peer, slot);
          buf->waitSend(a.timeout);
        } else {
          auto buf = context_->createUnboundBuffer(a.recv, Bytes(a, a.count));
          buf->recv(a.peer, slot);
          buf->waitRecv(a.timeout);
        }
        return Status::Ok();
      }
    }
    return Status::Internal("unknown collective");
  }

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  // Halving-doubling's own full mesh: the old template's pair buffers and the new-style API's unbound
  // buffers on the same TCP pairs stalled each other (an auto run mixing them at 3 ranks took 22 ms
  // per 16 B call and 13.7 s per 16 MiB call, against 1-7 ms and 39 ms for either alone).
  std::shared_ptr<::gloo::rendezvous::Context> hd_context_;
  std::shared_ptr<::gloo::transport::Device> device_;
  int rank_, size_;
  tune::Table table_;
  std::chrono::milliseconds pair_timeout_;  // the context's timeout at connect, fixed in every pair
  std::size_t hd_busy_max_bytes_;  // > 0: the halving-doubling pairs busy-poll; no larger call may use them
  std::optional<CollectiveAlgorithm> last_algorithm_;  // collectives run on one thread at a time
  std::unique_ptr<HalvingDoublingCache> hd_cache_;  // with hd_context_
  bool settle_on_close_ = false;    // the last collective ran halving-doubling (see ~GlooBackend)
  std::atomic<bool> broken_{false};  // a call failed or Abort came: peers may never reach a barrier
  std::vector<char> scratch_[2];
  std::vector<std::size_t> rs_counts_;  // reduce-scatter's per-rank counts, reused
  std::vector<std::size_t> offsets_;    // an all-gather's block offsets in the meeting, reused
  std::unique_ptr<SlotMeeting> meeting_;  // one node: every collective meets here first (Meet)
};

}  // namespace

Status FromGloo(const std::exception& e, std::string_view what) {
  std::string msg = e.what();
  // Gloo prefixes file:line: keep the message readable.
  if (auto pos = msg.find("] "); pos != std::string::npos && pos < 120) msg = msg.substr(pos + 2);
  if (msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos)
    return Status::Timeout(StrCat("gloo ", what, ": ", msg));
  if (dynamic_cast<const ::gloo::IoException*>(&e) != nullptr)
    return Status::RemoteError(StrCat("gloo ", what, ": ", msg, " (a peer exited or the network failed)"));
  return Status::BackendError(StrCat("gloo ", what, ": ", msg));
}

std::unique_ptr<Backend> MakeGlooBackend(std::shared_ptr<::gloo::rendezvous::Context> context,
                                         std::shared_ptr<::gloo::rendezvous::Context> hd_context,
                                         std::shared_ptr<::gloo::transport::Device> device, int rank, int size,
                                         tune::Table table, std::chrono::milliseconds pair_timeout,
                                         std::size_t hd_busy_max_bytes, std::unique_ptr<SlotMeeting> meeting) {
  return std::make_unique<GlooBackend>(std::move(context), std::move(hd_context), std::move(device), rank, size,
                                       std::move(table), pair_timeout, hd_busy_max_bytes, std::move(meeting));
}

}  // namespace commkit::comm::gloo
