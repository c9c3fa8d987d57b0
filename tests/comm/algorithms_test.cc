// The collective algorithm layer (commkit/comm/algorithms/) over an in-process transport, ranks as
// threads: every algorithm at 1-7 ranks (powers of two and not, so the folds run), in place and out of
// place, counts smaller than the rank count, several dtypes and reductions, bitwise-identical results
// on every rank, sub-groups in a permuted order, the deadline turning a silent peer into a timeout,
// and choices an entry does not run rejected. The fabric matches messages per ordered pair in order
// and checks sizes exactly, as the Transport contract says.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>
#include <type_traits>
#include <vector>

#include "commkit/comm/algorithms/algorithms.h"

namespace commkit::comm::algorithms {
namespace {

using namespace std::chrono_literals;

// Per ordered pair (from, to) a FIFO of messages; receives wait until the exchange's deadline.
class Fabric {
 public:
  explicit Fabric(int size) : size_(size), queues_(static_cast<std::size_t>(size * size)) {}
  void Push(int from, int to, std::vector<char> msg) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[Index(from, to)].push_back(std::move(msg));
    cv_.notify_all();
  }
  Status Pop(int from, int to, void* out, std::size_t bytes, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = queues_[Index(from, to)];
    if (!cv_.wait_until(lock, deadline, [&] { return !q.empty(); }))
      return Status::Timeout("rank " + std::to_string(to) + " got nothing from rank " + std::to_string(from));
    std::vector<char> msg = std::move(q.front());
    q.pop_front();
    if (msg.size() != bytes)
      return Status::Internal("size mismatch from rank " + std::to_string(from) + " to " + std::to_string(to) + ": " +
                              std::to_string(msg.size()) + " != " + std::to_string(bytes));
    if (bytes) std::memcpy(out, msg.data(), bytes);
    return Status::Ok();
  }
  std::size_t Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (auto& q : queues_) n += q.size();
    return n;
  }

 private:
  std::size_t Index(int from, int to) const { return static_cast<std::size_t>(from * size_ + to); }
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::vector<char>>> queues_;
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Fabric& f, int rank) : f_(f), rank_(rank) {}
  Status Exchange(std::span<Message> messages, Deadline deadline) override {
    ++exchanges;
    for (const Message& m : messages) {
      if (!m.send) continue;
      const char* s = static_cast<const char*>(m.data);
      f_.Push(rank_, m.peer, m.bytes ? std::vector<char>(s, s + m.bytes) : std::vector<char>());
    }
    for (const Message& m : messages) {
      if (m.send) continue;
      Status st = f_.Pop(m.peer, rank_, m.out, m.bytes, deadline);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  int exchanges = 0;

 private:
  Fabric& f_;
  int rank_;
};

template <typename F>
void OnRanks(int size, F&& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r); });
  for (auto& t : threads) t.join();
}

Deadline In(std::chrono::milliseconds d) { return Clock::now() + d; }

AlgorithmChoice Choice(CollectiveAlgorithm a, std::size_t segment = std::size_t{256} << 10) {
  AlgorithmChoice c;
  c.algorithm = a;
  c.segment_bytes = segment;
  return c;
}

constexpr CollectiveAlgorithm kAllreduceAlgorithms[] = {
    CollectiveAlgorithm::kRing, CollectiveAlgorithm::kRecursiveDoubling, CollectiveAlgorithm::kHalvingDoubling};

// Input of rank r, element i: small integers so f32 sums are exact and the expected value is known.
float Input(int r, std::size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 17)); }

TEST(Algorithms, AllreduceEveryAlgorithmRankCountAndPlacement) {
  const ReduceFunction sum = GetReduceFunction(DataType::kFloat32, ReduceKind::kSum);
  for (int size = 1; size <= 7; ++size) {
    for (CollectiveAlgorithm algo : kAllreduceAlgorithms) {
      for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{1000}, std::size_t{(1 << 18) + 3}}) {
        // 28 B: uneven ring pieces; 0: whole blocks (the segment only matters to the ring).
        for (std::size_t segment : {std::size_t{256} << 10, std::size_t{28}, std::size_t{0}}) {
          if (algo != CollectiveAlgorithm::kRing && segment != (std::size_t{256} << 10)) continue;
          if (segment == 28 && count > 1000) continue;  // thousands of steps: slow, nothing new
          for (bool in_place : {true, false}) {
            Fabric fabric(size);
            std::vector<std::vector<float>> out(static_cast<std::size_t>(size));
            OnRanks(size, [&](int r) {
              ThreadTransport t(fabric, r);
              std::vector<float> in(count), buf(count, -1.0f);
              for (std::size_t i = 0; i < count; ++i) in[i] = Input(r, i);
              if (in_place) buf = in;
              AllreduceArgs a;
              a.buf = buf.data();
              a.in = in_place ? nullptr : in.data();
              a.count = count;
              a.elem_size = sizeof(float);
              a.reduce = sum;
              std::vector<char> scratch;
              Status s = Allreduce(t, Group(r, size), a, Choice(algo, segment), In(30s), scratch);
              EXPECT_TRUE(s.ok()) << s.ToString();
              if (!in_place) {
                for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(in[i], Input(r, i)) << "input modified";
              }
              out[static_cast<std::size_t>(r)] = std::move(buf);
            });
            for (int r = 0; r < size; ++r) {
              const auto& v = out[static_cast<std::size_t>(r)];
              ASSERT_EQ(v.size(), count);
              for (std::size_t i = 0; i < count; ++i) {
                float want = 0;
                for (int q = 0; q < size; ++q) want += Input(q, i);
                ASSERT_EQ(v[i], want) << ToString(algo) << " size " << size << " count " << count << " segment "
                                      << segment << (in_place ? " in place" : " out of place") << " rank " << r
                                      << " i " << i;
              }
            }
            EXPECT_EQ(fabric.Pending(), 0u) << "messages left unreceived";
          }
        }
      }
    }
  }
}

// Integer reductions of every kind the kernels have, in several widths: exact expected values.
template <typename T>
void CheckIntegerAllreduce(DataType dtype, ReduceKind kind, CollectiveAlgorithm algo, int size, std::size_t count) {
  auto input = [](int r, std::size_t i) { return static_cast<T>((r * 7 + static_cast<int>(i) * 3) % 23 + 1); };
  auto combine = [&](T x, T y) -> T {
    switch (kind) {
      case ReduceKind::kSum: return static_cast<T>(x + y);
      case ReduceKind::kProd: return static_cast<T>(x * y);
      case ReduceKind::kMin: return std::min(x, y);
      case ReduceKind::kMax: return std::max(x, y);
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      if (kind == ReduceKind::kBand) return static_cast<T>(x & y);
      if (kind == ReduceKind::kBor) return static_cast<T>(x | y);
      if (kind == ReduceKind::kBxor) return static_cast<T>(x ^ y);
    }
    return x;
  };
  Fabric fabric(size);
  std::vector<std::vector<T>> out(static_cast<std::size_t>(size));
  OnRanks(size, [&](int r) {
    ThreadTransport t(fabric, r);
    std::vector<T> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = input(r, i);
    AllreduceArgs a;
    a.buf = buf.data();
    a.count = count;
    a.elem_size = sizeof(T);
    a.reduce = GetReduceFunction(dtype, kind);
    std::vector<char> scratch;
    Status s = Allreduce(t, Group(r, size), a, Choice(algo, 3 * sizeof(T)), In(30s), scratch);
    EXPECT_TRUE(s.ok()) << s.ToString();
    out[static_cast<std::size_t>(r)] = std::move(buf);
  });
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < count; ++i) {
      T want = input(0, i);
      for (int q = 1; q < size; ++q) want = combine(want, input(q, i));
      ASSERT_EQ(out[static_cast<std::size_t>(r)][i], want)
          << ToString(algo) << " " << ToString(kind) << " size " << size << " count " << count << " rank " << r;
    }
  EXPECT_EQ(fabric.Pending(), 0u);
}

TEST(Algorithms, AllreduceDtypesAndReductions) {
  for (CollectiveAlgorithm algo : kAllreduceAlgorithms) {
    for (int size = 1; size <= 5; ++size) {
      for (std::size_t count : {std::size_t{3}, std::size_t{64}}) {  // fewer elements than ranks, and more
        for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMin, ReduceKind::kMax}) {
          CheckIntegerAllreduce<std::int32_t>(DataType::kInt32, kind, algo, size, count);
          CheckIntegerAllreduce<double>(DataType::kFloat64, kind, algo, size, count);
        }
        CheckIntegerAllreduce<std::int64_t>(DataType::kInt64, ReduceKind::kProd, algo, size, count);
        CheckIntegerAllreduce<std::uint8_t>(DataType::kUInt8, ReduceKind::kBor, algo, size, count);
        CheckIntegerAllreduce<std::int64_t>(DataType::kInt64, ReduceKind::kBxor, algo, size, count);
        CheckIntegerAllreduce<std::int32_t>(DataType::kInt32, ReduceKind::kBand, algo, size, count);
      }
    }
  }
}

// Floating-point sums of non-representable values: every rank must still hold the same bits.
TEST(Algorithms, AllreduceResultsAreBitwiseIdenticalOnEveryRank) {
  const ReduceFunction sum = GetReduceFunction(DataType::kFloat64, ReduceKind::kSum);
  for (int size : {3, 5, 6, 7}) {
    for (CollectiveAlgorithm algo : kAllreduceAlgorithms) {
      const std::size_t count = 4099;
      Fabric fabric(size);
      std::vector<std::vector<double>> out(static_cast<std::size_t>(size), std::vector<double>(count));
      OnRanks(size, [&](int r) {
        ThreadTransport t(fabric, r);
        auto& buf = out[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < count; ++i) buf[i] = 1.0 / (3.0 + r * 7.0 + static_cast<double>(i));
        AllreduceArgs a;
        a.buf = buf.data();
        a.count = count;
        a.elem_size = sizeof(double);
        a.reduce = sum;
        std::vector<char> scratch;
        EXPECT_TRUE(Allreduce(t, Group(r, size), a, Choice(algo, 1000), In(30s), scratch).ok());
      });
      for (int r = 1; r < size; ++r)
        ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(), count * sizeof(double)), 0)
            << "rank " << r << " differs from rank 0 at size " << size << " " << ToString(algo);
    }
  }
}

// A sub-group in a permuted order (the host backend's leaders): ranks outside it send nothing.
TEST(Algorithms, AllreduceOnASubGroupInAnyOrder) {
  const int size = 6;
  const std::vector<int> members = {4, 1, 5, 2, 0};
  for (CollectiveAlgorithm algo : kAllreduceAlgorithms) {
    Fabric fabric(size);
    OnRanks(size, [&](int r) {
      Group g(members, r);
      if (g.index() < 0) return;
      ThreadTransport t(fabric, r);
      std::vector<std::int32_t> buf(11, r + 1);
      AllreduceArgs a;
      a.buf = buf.data();
      a.count = buf.size();
      a.elem_size = sizeof(std::int32_t);
      a.reduce = GetReduceFunction(DataType::kInt32, ReduceKind::kSum);
      std::vector<char> scratch;
      Status s = Allreduce(t, g, a, Choice(algo), In(30s), scratch);
      EXPECT_TRUE(s.ok()) << s.ToString();
      for (auto x : buf) EXPECT_EQ(x, 5 + 2 + 6 + 3 + 1) << ToString(algo) << " rank " << r;
    });
    EXPECT_EQ(fabric.Pending(), 0u);
  }
}

TEST(Algorithms, ReduceScatterAndAllgatherWithUnevenBlocks) {
  const ReduceFunction sum = GetReduceFunction(DataType::kInt32, ReduceKind::kSum);
  for (int size = 1; size <= 5; ++size) {
    for (std::size_t segment : {std::size_t{0}, std::size_t{8}, std::size_t{256} << 10}) {
      // Block q has (q * 5) % 7 elements: some empty, some cut into several pieces.
      std::vector<std::size_t> counts(static_cast<std::size_t>(size));
      for (int q = 0; q < size; ++q) counts[static_cast<std::size_t>(q)] = static_cast<std::size_t>((q * 5) % 7);
      const auto off = CountOffsets(counts, sizeof(std::int32_t));
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      Fabric fabric(size);
      OnRanks(size, [&](int r) {
        ThreadTransport t(fabric, r);
        std::vector<std::int32_t> buf(total);
        for (std::size_t i = 0; i < total; ++i) buf[i] = static_cast<std::int32_t>(i * 10 + static_cast<std::size_t>(r));
        std::vector<char> scratch;
        Status s = ReduceScatter(t, Group(r, size), buf.data(), off, sizeof(std::int32_t), sum,
                                 Choice(CollectiveAlgorithm::kRing, segment), In(30s), scratch);
        ASSERT_TRUE(s.ok()) << s.ToString();
        const std::size_t lo = off[static_cast<std::size_t>(r)] / sizeof(std::int32_t);
        for (std::size_t i = lo; i < lo + counts[static_cast<std::size_t>(r)]; ++i)
          EXPECT_EQ(buf[i], static_cast<std::int32_t>(i * 10 * static_cast<std::size_t>(size)) + size * (size - 1) / 2)
              << "reduce-scatter size " << size << " rank " << r << " i " << i;
        // All-gather the reduced blocks back.
        s = Allgather(t, Group(r, size), buf.data(), off, Choice(CollectiveAlgorithm::kRing, segment), In(30s));
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (std::size_t i = 0; i < total; ++i)
          EXPECT_EQ(buf[i], static_cast<std::int32_t>(i * 10 * static_cast<std::size_t>(size)) + size * (size - 1) / 2)
              << "all-gather size " << size << " rank " << r << " i " << i;
      });
      EXPECT_EQ(fabric.Pending(), 0u);
    }
  }
}

TEST(Algorithms, BroadcastFromEveryRootAndBarrier) {
  for (int size = 1; size <= 7; ++size) {
    for (int root = 0; root < size; ++root) {
      Fabric fabric(size);
      OnRanks(size, [&](int r) {
        ThreadTransport t(fabric, r);
        std::vector<int> buf(33, r == root ? 0 : -1);
        if (r == root)
          for (int i = 0; i < 33; ++i) buf[static_cast<std::size_t>(i)] = 1000 * root + i;
        Status s = Broadcast(t, Group(r, size), root, buf.data(), buf.size() * sizeof(int),
                             Choice(CollectiveAlgorithm::kBinomialTree), In(30s));
        EXPECT_TRUE(s.ok()) << s.ToString();
        for (int i = 0; i < 33; ++i) EXPECT_EQ(buf[static_cast<std::size_t>(i)], 1000 * root + i) << "rank " << r;
        s = Barrier(t, Group(r, size), Choice(CollectiveAlgorithm::kDissemination), In(30s));
        EXPECT_TRUE(s.ok()) << s.ToString();
      });
      EXPECT_EQ(fabric.Pending(), 0u);
    }
  }
}

TEST(Algorithms, AlltoallvGatherAndScatter) {
  for (int size = 1; size <= 5; ++size) {
    Fabric fabric(size);
    OnRanks(size, [&](int r) {
      ThreadTransport t(fabric, r);
      const Group g(r, size);
      // Rank r sends (r + q) % 3 elements to rank q, each r * 100 + q * 10 + k.
      std::vector<std::size_t> sc(static_cast<std::size_t>(size)), rc(static_cast<std::size_t>(size));
      for (int q = 0; q < size; ++q) {
        sc[static_cast<std::size_t>(q)] = static_cast<std::size_t>((r + q) % 3);
        rc[static_cast<std::size_t>(q)] = static_cast<std::size_t>((q + r) % 3);
      }
      const auto soff = CountOffsets(sc, sizeof(int)), roff = CountOffsets(rc, sizeof(int));
      std::vector<int> send(soff.back() / sizeof(int)), recv(roff.back() / sizeof(int), -1);
      for (int q = 0; q < size; ++q)
        for (std::size_t k = 0; k < sc[static_cast<std::size_t>(q)]; ++k)
          send[soff[static_cast<std::size_t>(q)] / sizeof(int) + k] = r * 100 + q * 10 + static_cast<int>(k);
      Status s = Alltoall(t, g, send.data(), soff, recv.data(), roff, Choice(CollectiveAlgorithm::kPairwise), In(30s));
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int q = 0; q < size; ++q)
        for (std::size_t k = 0; k < rc[static_cast<std::size_t>(q)]; ++k)
          EXPECT_EQ(recv[roff[static_cast<std::size_t>(q)] / sizeof(int) + k], q * 100 + r * 10 + static_cast<int>(k));
      for (int root = 0; root < size; ++root) {
        std::vector<int> mine(4, r * 10 + root), all(static_cast<std::size_t>(4 * size), -1);
        s = Gather(t, g, root, mine.data(), all.data(), mine.size() * sizeof(int), Choice(CollectiveAlgorithm::kDirect),
                   In(30s));
        ASSERT_TRUE(s.ok()) << s.ToString();
        if (r == root) {
          for (int q = 0; q < size; ++q) EXPECT_EQ(all[static_cast<std::size_t>(4 * q + 3)], q * 10 + root);
        }
        std::vector<int> piece(4, -1);
        if (r == root)
          for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i) + root;
        s = Scatter(t, g, root, all.data(), piece.data(), piece.size() * sizeof(int),
                    Choice(CollectiveAlgorithm::kDirect), In(30s));
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(piece[0], 4 * r + root);
      }
    });
    EXPECT_EQ(fabric.Pending(), 0u);
  }
}

// A rank that never arrives: the others end with the transport's timeout at the deadline, not a hang.
TEST(Algorithms, AMissingRankEndsAtTheDeadline) {
  const int size = 4, missing = 2;
  for (CollectiveAlgorithm algo : kAllreduceAlgorithms) {
    // The barrier gets a fabric of its own: a rank that timed out early must not feed its barrier
    // message to a peer still waiting inside the all-reduce.
    Fabric fabric(size), barrier_fabric(size);
    OnRanks(size, [&](int r) {
      if (r == missing) return;
      ThreadTransport t(fabric, r);
      std::vector<float> buf(100, 1.0f);
      AllreduceArgs a;
      a.buf = buf.data();
      a.count = buf.size();
      a.elem_size = sizeof(float);
      a.reduce = GetReduceFunction(DataType::kFloat32, ReduceKind::kSum);
      std::vector<char> scratch;
      const auto start = Clock::now();
      Status s = Allreduce(t, Group(r, size), a, Choice(algo), In(200ms), scratch);
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << ToString(algo) << " rank " << r << ": " << s.ToString();
      EXPECT_LT(Clock::now() - start, 20s) << "the deadline bounds the whole collective";
      ThreadTransport bt(barrier_fabric, r);
      s = Barrier(bt, Group(r, size), Choice(CollectiveAlgorithm::kDissemination), In(200ms));
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.ToString();
    });
  }
}

TEST(Algorithms, ChoicesAnEntryDoesNotRunAreRejected) {
  Fabric fabric(1);
  ThreadTransport t(fabric, 0);
  std::vector<char> scratch;
  float x = 1;
  AllreduceArgs a;
  a.buf = &x;
  a.count = 1;
  a.elem_size = sizeof(float);
  a.reduce = GetReduceFunction(DataType::kFloat32, ReduceKind::kSum);
  Status s = Allreduce(t, Group(0, 1), a, Choice(CollectiveAlgorithm::kBinomialTree), In(1s), scratch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("binomial_tree"), std::string::npos) << s.message();
  EXPECT_EQ(Barrier(t, Group(0, 1), Choice(CollectiveAlgorithm::kRing), In(1s)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Allreduce(t, Group(std::vector<int>{3, 4}, 0), a, Choice(CollectiveAlgorithm::kRing), In(1s), scratch).code(),
      StatusCode::kInvalidArgument)
      << "a rank outside the group";
  EXPECT_EQ(t.exchanges, 0);
  for (CollectiveAlgorithm algo :
       {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kRecursiveDoubling, CollectiveAlgorithm::kHalvingDoubling,
        CollectiveAlgorithm::kBinomialTree, CollectiveAlgorithm::kDissemination, CollectiveAlgorithm::kPairwise,
        CollectiveAlgorithm::kDirect}) {
    auto parsed = ParseCollectiveAlgorithm(ToString(algo));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, algo);
  }
  EXPECT_FALSE(ParseCollectiveAlgorithm("tree").ok());
}

// The selection table's choice as this layer's: the algorithm and segment carried over, a ring with
// fewer elements than ranks run as recursive doubling, algorithms the layer does not have refused.
TEST(Algorithms, AllreduceChoiceFromTheTable) {
  tune::Choice ring;
  ring.algorithm = CollectiveAlgorithm::kRing;
  ring.params.segment_bytes = 32 << 10;
  auto c = AllreduceChoice(ring, 1 << 18, 4);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(c->segment_bytes, std::size_t{32} << 10);
  c = AllreduceChoice(ring, 3, 4);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algorithm, CollectiveAlgorithm::kRecursiveDoubling);
  tune::Choice hd;
  hd.algorithm = CollectiveAlgorithm::kHalvingDoubling;
  c = AllreduceChoice(hd, 100, 4);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(c->segment_bytes, AlgorithmChoice{}.segment_bytes);
  tune::Choice library;
  library.algorithm = CollectiveAlgorithm::kLibrary;
  EXPECT_FALSE(AllreduceChoice(library, 100, 4).has_value());
}

}  // namespace
}  // namespace commkit::comm::algorithms
