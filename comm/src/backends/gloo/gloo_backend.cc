#include "gloo_backend.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <numeric>

#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

using std::chrono::milliseconds;

// Adapts a commkit Store to Gloo's rendezvous store (Gloo expects exceptions).
class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `prefix` separates the keys of several Gloo contexts connected over one store.
  GlooStore(std::shared_ptr<commkit::Store> store, milliseconds timeout, std::string prefix = "")
      : store_(std::move(store)), timeout_(timeout), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->Set(prefix_ + key, std::string_view(data.data(), data.size()));
    if (!s.ok()) throw gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(prefix_ + key, timeout_);
    if (!v.ok()) throw gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    Status s = store_->Wait(prefixed, timeout);
    if (!s.ok()) throw gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + s.ToString());
  }

 private:
  std::shared_ptr<commkit::Store> store_;
  milliseconds timeout_;
  std::string prefix_;
};

// The local address used to reach `host` (no packet is sent: a UDP connect only picks the route).
std::string LocalAddressTowards(const std::string& host) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      void* addr = local.ss_family == AF_INET6 ? static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                                               : static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// The interfaces of this host with an IPv4 or IPv6 address (what Gloo's tcp device can bind), sorted,
// without duplicates.
std::vector<std::string> InterfacesWithAddresses() {
  std::vector<std::string> names;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return names;
  for (struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr || i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    names.emplace_back(i->ifa_name);
  }
  ::freeifaddrs(list);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Status FromGloo(const std::exception& e, std::string_view what) {
  std::string msg = e.what();
  // Gloo prefixes file:line: keep the message readable.
  if (auto pos = msg.find("] "); pos != std::string::npos && pos < 120) msg = msg.substr(pos + 2);
  if (msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos)
    return Status::Timeout(StrCat("gloo ", what, ": ", msg));
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr)
    return Status::RemoteError(StrCat("gloo ", what, ": ", msg, " (a peer exited or the network failed)"));
  return Status::BackendError(StrCat("gloo ", what, ": ", msg));
}

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

// Gloo's all-reduce algorithms that commkit uses. kRing and kBcube are the new-style gloo::allreduce
// (out-of-place capable, per-call tag and timeout); kHalvingDoubling is the old in-place template
// gloo::AllreduceHalvingDoubling<T> (Debian's libgloo has no new-style halving-doubling).
enum class GlooAlgorithm { kRing, kHalvingDoubling, kBcube };

std::string_view ToString(GlooAlgorithm a) {
  switch (a) {
    case GlooAlgorithm::kRing: return "ring";
    case GlooAlgorithm::kHalvingDoubling: return "halving_doubling";
    case GlooAlgorithm::kBcube: return "bcube";
  }
  return "?";
}

// Which algorithm an all-reduce of `bytes` runs: the selection table's choice (tuning.h; the built-in
// rules, halving-doubling for small messages at power-of-two rank counts, are in comm/src/tune).
GlooAlgorithm FromTable(tune::Algorithm a) {
  return a == tune::Algorithm::kHalvingDoubling ? GlooAlgorithm::kHalvingDoubling
         : a == tune::Algorithm::kBcube         ? GlooAlgorithm::kBcube
                                                : GlooAlgorithm::kRing;
}

// Gloo's old templates take a plain function pointer; commkit's reductions are chosen at run time
// (dtype x op). The template runs the reduction on the calling thread inside run(), so the function
// is handed over in a thread-local for the duration of that call.
thread_local ReduceFunction tls_reduce = nullptr;

template <typename T>
void ReduceTrampoline(T* x, const T* y, size_t n) {
  tls_reduce(x, x, y, n);
}


class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<gloo::rendezvous::Context> context,
              std::shared_ptr<gloo::rendezvous::Context> hd_context, std::shared_ptr<gloo::transport::Device> device,
              int rank, int size, tune::Table table, std::chrono::milliseconds pair_timeout)
      : context_(std::move(context)),
        hd_context_(std::move(hd_context)),
        device_(std::move(device)),
        rank_(rank),
        size_(size),
        table_(std::move(table)),
        pair_timeout_(pair_timeout) {}

  std::string_view Name() const override { return "gloo"; }
  // Gloo's unbound-buffer send/recv are safe next to collectives on other threads (slots differ).
  bool ConcurrentPointToPoint() const override { return true; }

  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    return memory == MemoryKind::kHost && IsDefinedReduction(kind, dtype, op);
  }

  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& a) override {
    Status s;
    try {
      // Send/recv run on their own threads (ConcurrentPointToPoint) and carry their timeout per call.
      if (a.kind != CollectiveKind::kSend && a.kind != CollectiveKind::kRecv) context_->setTimeout(a.timeout);
      s = Dispatch(a);
    } catch (const std::exception& e) {
      s = FromGloo(e, ToString(a.kind));
    }
    return CompletedWork(std::move(s), a.sequence);
  }

  Result<std::unique_ptr<Backend>> Split(const BackendContext& context, int color, int) override {
    if (color < 0) return std::unique_ptr<Backend>();  // this rank joins no sub-group
    return CreateGlooBackend(context);
  }

  void Abort(std::string_view reason) override {
    COMMKIT_LOG_WARN("gloo backend: abort requested (", reason, "); pending operations end at their timeout");
  }

 private:
  std::size_t Bytes(const CollectiveArgs& a, std::size_t elems) const { return elems * SizeOf(a.dtype); }
  std::uint32_t Tag(const CollectiveArgs& a) const { return static_cast<std::uint32_t>(a.sequence & 0x7FFFFFFF); }

  // The algorithm for one all-reduce: the forced one or the `auto` table's, except that the old
  // halving-doubling template falls back to the new-style ring where it cannot honor the call: its
  // count is an int, and its waits use the pairs' timeout fixed at connect (the group's default), so
  // a per-op timeout override goes to the new API, which takes the timeout per call.
  GlooAlgorithm AlgorithmFor(const CollectiveArgs& a, std::size_t count) const {
    GlooAlgorithm algo = FromTable(table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, Bytes(a, count)).algorithm);
    if (algo == GlooAlgorithm::kHalvingDoubling &&
        (count > static_cast<std::size_t>(INT_MAX) || a.timeout != pair_timeout_ || hd_context_ == nullptr))
      algo = GlooAlgorithm::kRing;
    return algo;
  }

  // In-place allreduce of `buf` (count elements) with AVG / PREMUL_SUM handled around a SUM.
  void AllreduceInPlace(const CollectiveArgs& a, void* buf, std::size_t count) {
    if (count == 0) return;
    if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, buf, count, a.op.scalar);
    ReduceFunction fn = GetReduceFunction(a.dtype, a.op.kind);
    GlooAlgorithm algo = AlgorithmFor(a, count);
    if (algo != last_algorithm_) {  // one debug line per change, not per call
      COMMKIT_LOG_DEBUG("gloo all-reduce: ", ToString(algo), " from ", Bytes(a, count), " bytes at ", size_, " ranks (",
                        table_.Select(CollectiveKind::kAllreduce, MemoryKind::kHost, Bytes(a, count)).why, ")");
      last_algorithm_ = algo;
    }
    tune::NoteRun("gloo", algo == GlooAlgorithm::kHalvingDoubling ? tune::Algorithm::kHalvingDoubling
                          : algo == GlooAlgorithm::kBcube               ? tune::Algorithm::kBcube
                                                                        : tune::Algorithm::kRing);
    if (algo == GlooAlgorithm::kHalvingDoubling) {
      BySize(a.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::ReductionFunction<T> reduce(gloo::CUSTOM, &ReduceTrampoline<T>);
        gloo::AllreduceHalvingDoubling<T> hd(hd_context_, {static_cast<T*>(buf)}, static_cast<int>(count), &reduce);
        tls_reduce = fn;
        hd.run();
      });
    } else {
      gloo::AllreduceOptions opts(context_);
      opts.setTag(Tag(a));
      opts.setTimeout(a.timeout);
      opts.setAlgorithm(algo == GlooAlgorithm::kBcube ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                      : gloo::AllreduceOptions::Algorithm::RING);
      BySize(a.dtype, [&](auto t) {
        using T = decltype(t);
        opts.setOutput(static_cast<T*>(buf), count);
      });
      opts.setReduceFunction([fn](void* c, const void* x, const void* y, size_t n) { fn(c, x, y, n); });
      gloo::allreduce(opts);
    }
    if (a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, buf, count, size_);
  }

  Status Dispatch(const CollectiveArgs& a) {
    const std::size_t p = static_cast<std::size_t>(size_);
    switch (a.kind) {
      case CollectiveKind::kAllreduce: {
        if (a.send && a.send != a.recv) std::memcpy(a.recv, a.send, Bytes(a, a.count));
        AllreduceInPlace(a, a.recv, a.count);
        return Status::Ok();
      }
      case CollectiveKind::kBroadcast: {
        if (a.count == 0) return Status::Ok();
        gloo::BroadcastOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setOutput(static_cast<T*>(a.recv), a.count);
        });
        gloo::broadcast(opts);
        return Status::Ok();
      }
      case CollectiveKind::kReduce: {
        if (a.count == 0) return Status::Ok();
        // Gloo's reduce has no AVG/PREMUL: reduce a scaled copy as SUM, then scale the root's result.
        std::vector<char> input(static_cast<const char*>(a.send ? a.send : a.recv),
                                static_cast<const char*>(a.send ? a.send : a.recv) + Bytes(a, a.count));
        if (a.op.kind == ReduceKind::kPreMulSum) ScaleInPlace(a.dtype, input.data(), a.count, a.op.scalar);
        std::vector<char> scratch(Bytes(a, a.count));
        void* out = rank_ == a.root ? a.recv : scratch.data();
        gloo::ReduceOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(reinterpret_cast<T*>(input.data()), a.count);
          opts.setOutput(static_cast<T*>(out), a.count);
        });
        ReduceFunction fn = GetReduceFunction(a.dtype, a.op.kind);
        opts.setReduceFunction([fn](void* c, const void* x, const void* y, size_t n) { fn(c, x, y, n); });
        gloo::reduce(opts);
        if (rank_ == a.root && a.op.kind == ReduceKind::kAvg) DivideInPlace(a.dtype, a.recv, a.count, size_);
        return Status::Ok();
      }
      case CollectiveKind::kAllgather: {
        if (a.count == 0) return Status::Ok();
        std::vector<char> input;
        const void* in = a.send;
        if (a.send == nullptr || a.send == a.recv) in = static_cast<char*>(a.recv) + Bytes(a, a.count * rank_);
        if (in >= a.recv && in < static_cast<char*>(a.recv) + Bytes(a, a.count * p)) {
          input.assign(static_cast<const char*>(in), static_cast<const char*>(in) + Bytes(a, a.count));
          in = input.data();
        }
        gloo::AllgatherOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(in)), a.count);
          opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        gloo::allgather(opts);
        return Status::Ok();
      }
      case CollectiveKind::kAllgatherv: {
        std::size_t total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        if (total == 0) return Status::Ok();
        std::size_t offset = std::accumulate(a.counts.begin(), a.counts.begin() + rank_, std::size_t{0});
        std::vector<char> input(static_cast<const char*>(a.send ? a.send : static_cast<char*>(a.recv) + Bytes(a, offset)),
                                static_cast<const char*>(a.send ? a.send : static_cast<char*>(a.recv) + Bytes(a, offset)) +
                                    Bytes(a, a.counts[rank_]));
        std::vector<size_t> counts(a.counts.begin(), a.counts.end());
        gloo::AllgathervOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(reinterpret_cast<T*>(input.data()), a.counts[rank_]);
          opts.setOutput(static_cast<T*>(a.recv), counts);
        });
        gloo::allgatherv(opts);
        return Status::Ok();
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kReduceScatterV: {
        // Allreduce of the whole input, then this rank's block (Gloo has no out-of-place reduce-scatter).
        std::vector<std::size_t> counts = a.kind == CollectiveKind::kReduceScatter ? std::vector<std::size_t>(p, a.count)
                                                                                   : a.counts;
        std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        std::size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, std::size_t{0});
        std::vector<char> full(static_cast<const char*>(a.send), static_cast<const char*>(a.send) + Bytes(a, total));
        AllreduceInPlace(a, full.data(), total);
        if (counts[rank_]) std::memcpy(a.recv, full.data() + Bytes(a, offset), Bytes(a, counts[rank_]));
        return Status::Ok();
      }
      case CollectiveKind::kAlltoall: {
        if (a.count == 0) return Status::Ok();
        std::vector<char> input(static_cast<const char*>(a.send ? a.send : a.recv),
                                static_cast<const char*>(a.send ? a.send : a.recv) + Bytes(a, a.count * p));
        gloo::AlltoallOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(reinterpret_cast<T*>(input.data()), a.count * p);
          opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        gloo::alltoall(opts);
        return Status::Ok();
      }
      case CollectiveKind::kAlltoallv: {
        std::size_t in_total = std::accumulate(a.counts.begin(), a.counts.end(), std::size_t{0});
        // In place (send == nullptr or send == recv): the input is the start of the receive buffer
        // (ValidateArgs checked that it holds in_total elements); staged, as the output overwrites it.
        const char* from = static_cast<const char*>(a.send != nullptr ? a.send : a.recv);
        std::vector<char> input(from, from + Bytes(a, in_total));
        std::vector<int64_t> in_counts(a.counts.begin(), a.counts.end());
        std::vector<int64_t> out_counts(a.recv_counts.begin(), a.recv_counts.end());
        std::vector<char> dummy(8);
        gloo::AlltoallvOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(input.empty() ? reinterpret_cast<T*>(dummy.data()) : reinterpret_cast<T*>(input.data()), in_counts);
          opts.setOutput(a.recv ? static_cast<T*>(a.recv) : reinterpret_cast<T*>(dummy.data()), out_counts);
        });
        gloo::alltoallv(opts);
        return Status::Ok();
      }
      case CollectiveKind::kGather: {
        if (a.count == 0) return Status::Ok();
        gloo::GatherOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        opts.setRoot(a.root);
        BySize(a.dtype, [&](auto t) {
          using T = decltype(t);
          opts.setInput(const_cast<T*>(static_cast<const T*>(a.send)), a.count);
          if (rank_ == a.root) opts.setOutput(static_cast<T*>(a.recv), a.count * p);
        });
        gloo::gather(opts);
        return Status::Ok();
      }
      case CollectiveKind::kScatter: {
        if (a.count == 0) return Status::Ok();
        gloo::ScatterOptions opts(context_);
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
        gloo::scatter(opts);
        return Status::Ok();
      }
      case CollectiveKind::kBarrier: {
        gloo::BarrierOptions opts(context_);
        opts.setTag(Tag(a));
        opts.setTimeout(a.timeout);
        gloo::barrier(opts);
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

  std::shared_ptr<gloo::rendezvous::Context> context_;
  // Halving-doubling's own full mesh: the old template's pair buffers and the new-style API's unbound
  // buffers on the same TCP pairs stalled each other (an auto run mixing them at 3 ranks took 22 ms
  // per 16 B call and 13.7 s per 16 MiB call, against 1-7 ms and 39 ms for either alone).
  std::shared_ptr<gloo::rendezvous::Context> hd_context_;
  std::shared_ptr<gloo::transport::Device> device_;
  int rank_, size_;
  tune::Table table_;
  std::chrono::milliseconds pair_timeout_;  // the context's timeout at connect, fixed in every pair
  std::optional<GlooAlgorithm> last_algorithm_;  // collectives run on one thread at a time
};

// Gloo's tcp pair sets SO_SNDBUF to the largest message it has written so far; a later message just
// under twice that size then waits on delayed ACKs (70-105 ms per call, see platform-notes). Writing
// one message of at least net.core.wmem_max on every pair at connect fixes the buffer at its ceiling
// so no later size can hit the stall. COMMKIT_GLOO_PRIME_BYTES overrides the size (0 disables).
std::int64_t DefaultPrimeBytes() {
  std::int64_t bytes = 4 << 20;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    long long v = 0;
    if (std::fscanf(f, "%lld", &v) == 1 && v > 0) bytes = v;
    std::fclose(f);
  }
  return std::min<std::int64_t>(bytes, 64 << 20);
}

// Every rank sends `bytes` to and receives `bytes` from every peer (sends posted first, so no order
// between peers is needed). Throws gloo exceptions on failure or timeout.
void PrimePairs(gloo::rendezvous::Context& context, std::size_t bytes, std::chrono::milliseconds timeout) {
  const int rank = context.rank, size = context.size;
  if (bytes == 0 || size < 2) return;
  constexpr std::uint64_t kPrimeSlot = 0xC1ull << 56;
  std::vector<char> out(bytes, 0);
  auto send = context.createUnboundBuffer(out.data(), out.size());
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) send->send(peer, kPrimeSlot);
  }
  // Receives in batches so a large world needs at most kBatch buffers of `bytes`.
  constexpr int kBatch = 8;
  std::vector<std::vector<char>> in(static_cast<std::size_t>(std::min(kBatch, size)), std::vector<char>(bytes));
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs;
  for (int first = 0; first < size; first += kBatch) {
    recvs.clear();
    for (int peer = first; peer < std::min(size, first + kBatch); ++peer) {
      if (peer == rank) continue;
      recvs.push_back(context.createUnboundBuffer(in[peer - first].data(), bytes));
      recvs.back()->recv(peer, kPrimeSlot);
    }
    for (auto& r : recvs) r->waitRecv(timeout);
  }
  for (int i = 0; i < size - 1; ++i) send->waitSend(timeout);
}

}  // namespace

Result<std::unique_ptr<Backend>> CreateGlooBackend(const BackendContext& ctx) {
  gloo::transport::tcp::attr attr;
  std::optional<std::string> iface;
  const char* iface_var = "COMMKIT_SOCKET_IFNAME";
  COMMKIT_ASSIGN_OR_RETURN(iface, EnvString(iface_var));
  if (!iface) {
    iface_var = "GLOO_SOCKET_IFNAME";
    COMMKIT_ASSIGN_OR_RETURN(iface, EnvString(iface_var));
  }
  std::string where;
  if (iface && !iface->empty()) {
    // Gloo's own error for this is "Unable to find address for: <name>"; say which variable chose it,
    // what this host has, and what to do.
    std::vector<std::string> names = InterfacesWithAddresses();
    if (std::find(names.begin(), names.end(), *iface) == names.end())
      return Status::InvalidArgument(
          StrCat("gloo backend, rank ", ctx.rank, "/", ctx.size, " of ", ctx.group_name, ": ", iface_var, "=", *iface,
                 ": this host has no network interface '", *iface, "' with an IP address (interfaces with one: ",
                 names.empty() ? std::string("none") : Join(names, ", "), "); set ", iface_var,
                 " to an interface every rank can reach, or unset it to use the address that routes to MASTER_ADDR"));
    attr.iface = *iface;
    where = StrCat("interface ", *iface);
  } else {
    std::string master = EnvRaw("MASTER_ADDR").value_or("127.0.0.1");
    std::string local = LocalAddressTowards(master);
    attr.hostname = local.empty() ? "127.0.0.1" : local;
    where = StrCat("address ", attr.hostname, " (routes to MASTER_ADDR ", master, ")");
  }
  std::int64_t prime_bytes = 0;
  COMMKIT_ASSIGN_OR_RETURN(prime_bytes, EnvIntOr("COMMKIT_GLOO_PRIME_BYTES", DefaultPrimeBytes(), 0, 1ll << 30));
  std::string who = StrCat("gloo backend, rank ", ctx.rank, "/", ctx.size, " of ", ctx.group_name);
  tune::TableOptions tune_options;
  tune_options.store = ctx.store;
  tune_options.rank = ctx.rank;
  tune_options.timeout = ctx.timeout;
  auto table = tune::Table::ForGroup("gloo", {ctx.size, ctx.size, 1}, tune_options);
  if (!table.ok()) return table.status().WithContext(who);
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(ctx.timeout);
    GlooStore store(ctx.store, ctx.timeout);
    context->connectFullMesh(store, device);
    PrimePairs(*context, static_cast<std::size_t>(prime_bytes), ctx.timeout);
    std::shared_ptr<gloo::rendezvous::Context> hd_context;
    const bool uses_hd = table->Uses(CollectiveKind::kAllreduce, tune::Algorithm::kHalvingDoubling);
    if (ctx.size > 1 && uses_hd) {
      hd_context = std::make_shared<gloo::rendezvous::Context>(ctx.rank, ctx.size);
      hd_context->setTimeout(ctx.timeout);
      GlooStore hd_store(ctx.store, ctx.timeout, "hd/");
      hd_context->connectFullMesh(hd_store, device);
      PrimePairs(*hd_context, static_cast<std::size_t>(prime_bytes), ctx.timeout);
    }
    COMMKIT_LOG_INFO(who, ": connected full mesh on ", where, ", pairs primed with ", prime_bytes,
                     " bytes, all-reduce: ", tune::Describe(*table, CollectiveKind::kAllreduce, MemoryKind::kHost));
    return std::unique_ptr<Backend>(
        new GlooBackend(context, hd_context, device, ctx.rank, ctx.size, std::move(*table), ctx.timeout));
  } catch (const std::exception& e) {
    return FromGloo(e, "connect").WithContext(StrCat(who, " on ", where,
                                                     " (set COMMKIT_SOCKET_IFNAME to an interface every rank can reach)"));
  }
}

}  // namespace commkit
