// Peer benchmark: the same float32 sum all-reduce / allgather / reduce_scatter (and root-0 broadcast)
// sweep as commkit-bench, called directly on another library, so scripts/peer-bench can put commkit
// next to it in one table.
// Built by scripts/peer-bench (not by CMake: each MPI has its own headers and launcher):
//   any MPI (Open MPI, MPICH, Intel MPI): MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast;
//   -DPEER_CCL, against Intel MPI + oneCCL: ccl::allreduce, ccl::allgather, ccl::reduce_scatter,
//   ccl::broadcast, with MPI only for launch, the key-value store address, barriers and the cross-rank
//   time reduction;
//   --ceiling (any MPI build, all-reduce only): the memory ceiling of an all-reduce measured in the same
//   run: every rank's input and output live in one MPI shared-memory window, and rank r sums slice r of
//   all inputs and stores it into slice r of every output in one pass (each byte read once, each result
//   written once: the least memory traffic any all-reduce can have), then all ranks meet at a barrier.
// Conventions follow commkit-bench (docs/benchmarks.md) so rows compare one to one: `size` is the
// largest buffer a rank touches, time per call is the mean over the iterations and the maximum over
// ranks, busbw = size / time x 2(n-1)/n (all-reduce), 1 (broadcast) or (n-1)/n, iterations shrink above
// --large-bytes, a warmup at the largest size runs first, buffers are out of place (broadcast: in place,
// commkit-bench's broadcast has one buffer only) and every size is verified afterwards against a per-rank
// pattern (#wrong).
// Output: JSON lines on rank 0's stdout, one per (collective, size).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <sys/mman.h>

#include <mpi.h>

#ifdef PEER_CCL
#include <oneapi/ccl.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Coll { kAllreduce, kAllgather, kReduceScatter, kBroadcast };

struct Options {
  std::vector<Coll> colls;
  std::size_t min_bytes = 8, max_bytes = 1 << 20, large_bytes = 16u << 20;
  int factor = 2, warmup = 5, iters = 20;
  bool check = true;
  bool ceiling = false;
  std::string label = "peer";
};

const char* Name(Coll c) {
  switch (c) {
    case Coll::kAllreduce: return "allreduce";
    case Coll::kAllgather: return "allgather";
    case Coll::kReduceScatter: return "reduce_scatter";
    case Coll::kBroadcast: return "broadcast";
  }
  return "?";
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "peer-bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

std::size_t ParseBytes(std::string_view s) {
  if (s.empty()) Fail("empty size");
  std::size_t mult = 1;
  switch (s.back()) {
    case 'K': case 'k': mult = std::size_t{1} << 10; s.remove_suffix(1); break;
    case 'M': case 'm': mult = std::size_t{1} << 20; s.remove_suffix(1); break;
    case 'G': case 'g': mult = std::size_t{1} << 30; s.remove_suffix(1); break;
    default: break;
  }
  char* end = nullptr;
  const std::string digits(s);
  const unsigned long long v = std::strtoull(digits.c_str(), &end, 10);
  if (end == digits.c_str() || *end != '\0') Fail("bad size '" + digits + "'");
  return static_cast<std::size_t>(v) * mult;
}

int ParseInt(const char* s, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > 1000000) Fail(std::string("bad ") + what + " '" + s + "'");
  return static_cast<int>(v);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Fail("missing value after " + std::string(a));
      return argv[++i];
    };
    if (a == "-c" || a == "--collectives") {
      std::string_view list = value();
      while (!list.empty()) {
        const std::size_t comma = list.find(',');
        const std::string_view name = list.substr(0, comma);
        if (name == "allreduce") o.colls.push_back(Coll::kAllreduce);
        else if (name == "allgather") o.colls.push_back(Coll::kAllgather);
        else if (name == "reduce_scatter") o.colls.push_back(Coll::kReduceScatter);
        else if (name == "broadcast") o.colls.push_back(Coll::kBroadcast);
        else Fail("unknown collective '" + std::string(name) + "' (allreduce, allgather, reduce_scatter, broadcast)");
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
    } else if (a == "-b") {
      o.min_bytes = ParseBytes(value());
    } else if (a == "-e") {
      o.max_bytes = ParseBytes(value());
    } else if (a == "-f") {
      o.factor = ParseInt(value(), "-f");
    } else if (a == "-w") {
      o.warmup = ParseInt(value(), "-w");
    } else if (a == "-n") {
      o.iters = ParseInt(value(), "-n");
    } else if (a == "--large-bytes") {
      o.large_bytes = ParseBytes(value());
    } else if (a == "--check") {
      o.check = ParseInt(value(), "--check") != 0;
    } else if (a == "--ceiling") {
      o.ceiling = true;
    } else if (a == "--label") {
      o.label = value();
    } else {
      Fail("unknown argument '" + std::string(a) +
           "'; usage: peer-bench -c allreduce,allgather,reduce_scatter,broadcast -b 8 -e 1M -f 2 -w 5 -n 20 "
           "[--large-bytes 16M] [--check 1] [--label NAME] [--ceiling]");
    }
  }
  if (o.colls.empty()) o.colls = {Coll::kAllreduce, Coll::kAllgather, Coll::kReduceScatter};
  if (o.ceiling) o.colls = {Coll::kAllreduce};
  if (o.factor < 2 || o.iters < 1 || o.min_bytes < 4 || o.max_bytes < o.min_bytes) Fail("bad sweep arguments");
  return o;
}

// Warmup/iteration counts as commkit-bench's ItersForSize: above large_bytes each size moves about
// iters x large_bytes bytes.
void ItersFor(const Options& o, std::size_t bytes, int& warmup, int& iters) {
  warmup = o.warmup;
  iters = o.iters;
  if (o.large_bytes > 0 && bytes > o.large_bytes) {
    const double scale = static_cast<double>(o.large_bytes) / static_cast<double>(bytes);
    iters = std::min(o.iters, std::max(2, static_cast<int>(std::ceil(o.iters * scale))));
    warmup = std::min(o.warmup, std::max(1, static_cast<int>(std::ceil(o.warmup * scale))));
  }
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

// From 2 MiB on, 2 MiB-aligned and advised as transparent huge pages, as commkit-bench's buffers are
// (bench/src/runner.cc HostBuffer): every series runs on the same kind of memory.
Buffer Allocate(std::size_t elems) {
  const std::size_t want = elems * sizeof(float), align = want >= (2u << 20) ? (2u << 20) : 4096;
  const std::size_t bytes = std::max<std::size_t>(4096, (want + align - 1) / align * align);
  auto* p = static_cast<float*>(std::aligned_alloc(align, bytes));
  if (p == nullptr) Fail("out of memory allocating " + std::to_string(bytes) + " B");
  if (align > 4096) (void)madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);  // fault the pages in before timing, as commkit-bench's buffers are
  return Buffer(p);
}

// Element counts per rank, commkit-bench's convention (bench/src/collective.cc).
struct Counts {
  std::size_t send = 0, recv = 0, count = 0;
};

Counts CountsFor(Coll c, std::size_t bytes, int n) {
  const std::size_t elems = bytes / sizeof(float);
  const std::size_t total = elems / static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  Counts k;
  switch (c) {
    case Coll::kAllreduce: k.send = k.recv = k.count = elems; break;
    case Coll::kAllgather: k.recv = total; k.send = k.count = total / static_cast<std::size_t>(n); break;
    case Coll::kReduceScatter: k.send = total; k.recv = k.count = total / static_cast<std::size_t>(n); break;
    case Coll::kBroadcast: k.recv = k.count = elems; break;  // in place on the receive buffer
  }
  return k;
}

double BusFactor(Coll c, int n) {
  if (c == Coll::kBroadcast) return 1.0;  // nccl-tests: every rank but the root receives the whole buffer
  return c == Coll::kAllreduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

// Small integers keep float sums exact at every rank count this harness runs.
float Pattern(int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 7); }

class Library {
 public:
  Library(int rank, int nranks) : rank_(rank), nranks_(nranks) {
#ifdef PEER_CCL
    ccl::init();
    ccl::kvs::address_type address;
    if (rank == 0) {
      kvs_ = ccl::create_main_kvs();
      address = kvs_->get_address();
    }
    MPI_Bcast(address.data(), static_cast<int>(address.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0) kvs_ = ccl::create_kvs(address);
    comm_ = std::make_unique<ccl::communicator>(ccl::create_communicator(nranks, rank, kvs_));
#endif
  }

  void Run(Coll c, const float* send, float* recv, const Counts& k) {
#ifdef PEER_CCL
    switch (c) {
      case Coll::kAllreduce: ccl::allreduce(send, recv, k.count, ccl::reduction::sum, *comm_).wait(); return;
      case Coll::kAllgather: ccl::allgather(send, recv, k.count, *comm_).wait(); return;
      case Coll::kReduceScatter:
        ccl::reduce_scatter(send, recv, k.count, ccl::reduction::sum, *comm_).wait();
        return;
      case Coll::kBroadcast: ccl::broadcast(recv, k.count, 0, *comm_).wait(); return;
    }
#else
    const int count = static_cast<int>(k.count);
    int rc = MPI_SUCCESS;
    switch (c) {
      case Coll::kAllreduce: rc = MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case Coll::kAllgather: rc = MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD); break;
      case Coll::kReduceScatter:
        rc = MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Coll::kBroadcast: rc = MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    }
    if (rc != MPI_SUCCESS) Fail(std::string(Name(c)) + " failed with MPI error " + std::to_string(rc));
#endif
  }

  // Returns the number of wrong output elements on this rank after one call on patterned inputs.
  std::uint64_t Verify(Coll c, float* send, float* recv, const Counts& k) {
    for (std::size_t i = 0; i < k.send; ++i) send[i] = Pattern(rank_, i);
    for (std::size_t i = 0; i < k.recv; ++i) recv[i] = c == Coll::kBroadcast && rank_ == 0 ? Pattern(0, i) : -1.0f;
    Run(c, send, recv, k);
    const float n = static_cast<float>(nranks_);
    const float rank_sum = n * (n + 1.0f) / 2.0f;
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < k.recv; ++i) {
      float want = 0.0f;
      switch (c) {
        case Coll::kAllreduce: want = rank_sum + n * static_cast<float>(i % 7); break;
        case Coll::kAllgather: want = Pattern(static_cast<int>(i / k.count), i % k.count); break;
        case Coll::kReduceScatter:
          want = rank_sum + n * static_cast<float>((static_cast<std::size_t>(rank_) * k.count + i) % 7);
          break;
        case Coll::kBroadcast: want = Pattern(0, i); break;
      }
      if (recv[i] != want) ++wrong;
    }
    return wrong;
  }

 private:
  int rank_, nranks_;
#ifdef PEER_CCL
  ccl::shared_ptr_class<ccl::kvs> kvs_;
  std::unique_ptr<ccl::communicator> comm_;
#endif
};

#ifndef PEER_CCL
// The memory ceiling (see the top of the file). Run() ignores the caller's buffers: the window holds
// n inputs and n outputs of the largest size (padded), laid out [in_0 .. in_{n-1}, out_0 .. out_{n-1}].
class Ceiling {
 public:
  // The buffers are not laid out at the exact size apart: at power-of-two distances from 128 MiB up
  // their lines share the low linear-address bits that some cores' L1 (AMD Zen's micro-tags) keys on,
  // and they evict each other on every access. On the development VM, 4 buffers 256 MiB apart ran this
  // loop at 1.2 GB/s at every size; 256 MiB + 4160 bytes apart at 26.6 GB/s (a 4 KiB-multiple plus a
  // line breaks both the page-offset and the line alignment).
  static constexpr std::size_t kPadElems = (4096 + 64) / sizeof(float);
  Ceiling(int rank, int nranks, std::size_t max_elems)
      : rank_(rank), nranks_(nranks), stride_((max_elems + 15) / 16 * 16 + kPadElems) {
    const std::size_t mine = rank == 0 ? 2 * static_cast<std::size_t>(nranks) * stride_ * sizeof(float) : 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
    void* base = nullptr;
    if (MPI_Win_allocate_shared(static_cast<MPI_Aint>(mine), sizeof(float), MPI_INFO_NULL, node_, &base, &win_) !=
        MPI_SUCCESS) {
      Fail("MPI_Win_allocate_shared failed (the ceiling needs every rank on one node)");
    }
    MPI_Aint size = 0;
    int disp = 0;
    MPI_Win_shared_query(win_, 0, &size, &disp, &base);
    base_ = static_cast<float*>(base);
    // Each rank faults in its own slice of every buffer, as it will touch them.
    const auto n = static_cast<std::size_t>(nranks);
    for (std::size_t b = 0; b < 2 * n; ++b) {
      std::memset(base_ + b * stride_ + static_cast<std::size_t>(rank) * (stride_ / n), 0, stride_ / n * sizeof(float));
    }
    MPI_Barrier(node_);
  }
  ~Ceiling() {
    MPI_Win_free(&win_);
    MPI_Comm_free(&node_);
  }
  Ceiling(const Ceiling&) = delete;
  Ceiling& operator=(const Ceiling&) = delete;

  float* Input(int r) { return base_ + static_cast<std::size_t>(r) * stride_; }
  float* Output(int r) { return base_ + (static_cast<std::size_t>(nranks_ + r)) * stride_; }

  void Run(std::size_t count) {
    const auto n = static_cast<std::size_t>(nranks_);
    const std::size_t per = (count + n - 1) / n;
    const std::size_t begin = std::min(count, per * static_cast<std::size_t>(rank_));
    const std::size_t end = std::min(count, begin + per);
    if (nranks_ == 2) {
      const float* __restrict a = Input(0) + begin;
      const float* __restrict b = Input(1) + begin;
      float* __restrict x = Output(0) + begin;
      float* __restrict y = Output(1) + begin;
      for (std::size_t i = 0; i < end - begin; ++i) x[i] = y[i] = a[i] + b[i];
    } else {
      for (std::size_t i = begin; i < end; ++i) {
        float s = 0.0f;
        for (int r = 0; r < nranks_; ++r) s += Input(r)[i];
        for (int r = 0; r < nranks_; ++r) Output(r)[i] = s;
      }
    }
    MPI_Barrier(node_);
  }

  std::uint64_t Verify(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) Input(rank_)[i] = Pattern(rank_, i);
    MPI_Barrier(node_);
    Run(count);
    const float n = static_cast<float>(nranks_);
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (Output(rank_)[i] != n * (n + 1.0f) / 2.0f + n * static_cast<float>(i % 7)) ++wrong;
    }
    return wrong;
  }

 private:
  int rank_, nranks_;
  std::size_t stride_;
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  float* base_ = nullptr;
};
#endif

std::vector<std::size_t> Sizes(const Options& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes; s *= static_cast<std::size_t>(o.factor)) {
    sizes.push_back(s);
    if (s > o.max_bytes / static_cast<std::size_t>(o.factor)) break;
  }
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const Options o = Parse(argc, argv);
  const std::vector<std::size_t> sizes = Sizes(o);
  if (sizes.empty()) Fail("no sizes in the range");
  std::uint64_t total_wrong = 0;
  {
    Library lib(rank, nranks);
    const std::size_t max_elems = sizes.back() / sizeof(float) + 1;
    Buffer send = Allocate(o.ceiling ? 1 : max_elems), recv = Allocate(o.ceiling ? 1 : max_elems);
#ifdef PEER_CCL
    if (o.ceiling) Fail("--ceiling is built with the MPI programs, not with oneCCL");
    auto run = [&](Coll c, const Counts& k) { lib.Run(c, send.get(), recv.get(), k); };
    auto verify = [&](Coll c, const Counts& k) { return lib.Verify(c, send.get(), recv.get(), k); };
#else
    std::unique_ptr<Ceiling> ceiling = o.ceiling ? std::make_unique<Ceiling>(rank, nranks, max_elems) : nullptr;
    auto run = [&](Coll c, const Counts& k) {
      if (ceiling) ceiling->Run(k.count);
      else lib.Run(c, send.get(), recv.get(), k);
    };
    auto verify = [&](Coll c, const Counts& k) {
      return ceiling ? ceiling->Verify(k.count) : lib.Verify(c, send.get(), recv.get(), k);
    };
#endif
    for (Coll c : o.colls) {
      {  // warmup at the largest size (connections, internal buffers), as commkit-bench does
        int warmup = 0, iters = 0;
        ItersFor(o, sizes.back(), warmup, iters);
        const Counts k = CountsFor(c, sizes.back(), nranks);
        for (int i = 0; i < std::max(1, warmup); ++i) run(c, k);
      }
      for (std::size_t bytes : sizes) {
        const Counts k = CountsFor(c, bytes, nranks);
        if (k.count == 0) continue;
        int warmup = 0, iters = 0;
        ItersFor(o, bytes, warmup, iters);
        for (int i = 0; i < warmup; ++i) run(c, k);
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) run(c, k);
        const double mine = std::chrono::duration<double>(Clock::now() - start).count() / iters;
        double seconds = 0.0;
        MPI_Allreduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        std::uint64_t wrong = o.check ? verify(c, k) : 0, all_wrong = 0;
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += all_wrong;
        if (rank == 0) {
          const double algbw = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
          std::printf(
              "{\"peer\":\"%s\",\"collective\":\"%s\",\"size\":%zu,\"count\":%zu,\"nranks\":%d,"
              "\"time_us\":%.6g,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g,\"wrong\":%llu,\"checked\":%s,"
              "\"warmup\":%d,\"iters\":%d}\n",
              o.label.c_str(), Name(c), bytes, k.count, nranks, seconds * 1e6, algbw, algbw * BusFactor(c, nranks),
              static_cast<unsigned long long>(all_wrong), o.check ? "true" : "false", warmup, iters);
          std::fflush(stdout);
        }
      }
    }
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 3;
}
