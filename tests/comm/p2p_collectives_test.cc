// The point-to-point all-reduce / broadcast / barrier of the MPI backend (comm/backends/mpi/src/
// p2p_collectives.h) over an in-process transport, ranks as threads: every rank count 1-7 (powers of
// two and not, so recursive doubling's fold runs), both algorithms, in place and out of place,
// bitwise-identical results on every rank, and a silent peer turning into the transport's error.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "p2p_collectives.h"

namespace commkit {
namespace {

// Per ordered pair (from, to) a FIFO of messages; receives wait at most `timeout`.
class Fabric {
 public:
  explicit Fabric(int size) : size_(size), queues_(static_cast<std::size_t>(size * size)) {}
  void Push(int from, int to, std::vector<char> msg) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[Index(from, to)].push_back(std::move(msg));
    cv_.notify_all();
  }
  Status Pop(int from, int to, void* out, std::size_t bytes, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = queues_[Index(from, to)];
    if (!cv_.wait_for(lock, timeout, [&] { return !q.empty(); }))
      return Status::Timeout("rank " + std::to_string(to) + " got nothing from rank " + std::to_string(from));
    std::vector<char> msg = std::move(q.front());
    q.pop_front();
    if (msg.size() != bytes)
      return Status::Internal("size mismatch: " + std::to_string(msg.size()) + " != " + std::to_string(bytes));
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

class ThreadTransport final : public P2pTransport {
 public:
  ThreadTransport(Fabric& f, int rank, std::chrono::milliseconds timeout) : f_(f), rank_(rank), timeout_(timeout) {}
  Status SendRecv(int to, const void* send, std::size_t send_bytes, int from, void* recv,
                  std::size_t recv_bytes) override {
    if (to >= 0) {
      const char* s = static_cast<const char*>(send);
      f_.Push(rank_, to, std::vector<char>(s, s + send_bytes));
    }
    if (from >= 0) return f_.Pop(from, rank_, recv, recv_bytes, timeout_);
    return Status::Ok();
  }

 private:
  Fabric& f_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

template <typename F>
void OnRanks(int size, F&& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r); });
  for (auto& t : threads) t.join();
}

// Input of rank r, element i: small integers so f32 sums are exact and the expected value is known.
float Input(int r, std::size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 17)); }

TEST(P2pCollectives, AllreduceEveryRankCountAlgorithmAndPlacement) {
  const ReduceFunction sum = GetReduceFunction(DataType::kFloat32, ReduceKind::kSum);
  for (int size = 1; size <= 7; ++size) {
    for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{(1 << 18) + 3}}) {
      for (std::size_t ring_min : {std::size_t{0}, std::size_t{1} << 30}) {  // force ring / recursive doubling
        for (std::size_t segment : {std::size_t{256} << 10, std::size_t{28}}) {  // 28 B: uneven pieces
          for (bool in_place : {true, false}) {
            if (segment == 28 && count > 1000) continue;  // thousands of steps: slow, nothing new
            Fabric fabric(size);
            std::vector<std::vector<float>> out(static_cast<std::size_t>(size));
            OnRanks(size, [&](int r) {
              ThreadTransport t(fabric, r, std::chrono::seconds(30));
              std::vector<float> in(count), buf(count, -1.0f);
              for (std::size_t i = 0; i < count; ++i) in[i] = Input(r, i);
              if (in_place) buf = in;
              P2pAllreduceArgs a;
              a.buf = buf.data();
              a.in = in_place ? nullptr : in.data();
              a.count = count;
              a.elem_size = sizeof(float);
              a.reduce = sum;
              a.ring_min_bytes = ring_min;
              a.segment_bytes = segment;
              std::vector<char> scratch;
              Status s = P2pAllreduce(t, r, size, a, scratch);
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
                ASSERT_EQ(v[i], want) << "size " << size << " count " << count << " ring_min " << ring_min
                                      << " segment " << segment
                                      << (in_place ? " in place" : " out of place") << " rank " << r << " i " << i;
              }
            }
            EXPECT_EQ(fabric.Pending(), 0u) << "messages left unreceived";
          }
        }
      }
    }
  }
}

// Floating-point sums of non-representable values: every rank must still hold the same bits.
TEST(P2pCollectives, AllreduceResultsAreBitwiseIdenticalOnEveryRank) {
  const ReduceFunction sum = GetReduceFunction(DataType::kFloat64, ReduceKind::kSum);
  for (int size : {3, 5, 6, 7}) {
    for (std::size_t ring_min : {std::size_t{0}, std::size_t{1} << 30}) {
      const std::size_t count = 4099;
      Fabric fabric(size);
      std::vector<std::vector<double>> out(static_cast<std::size_t>(size), std::vector<double>(count));
      OnRanks(size, [&](int r) {
        ThreadTransport t(fabric, r, std::chrono::seconds(30));
        auto& buf = out[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < count; ++i) buf[i] = 1.0 / (3.0 + r * 7.0 + static_cast<double>(i));
        P2pAllreduceArgs a;
        a.buf = buf.data();
        a.count = count;
        a.elem_size = sizeof(double);
        a.reduce = sum;
        a.ring_min_bytes = ring_min;
        std::vector<char> scratch;
        EXPECT_TRUE(P2pAllreduce(t, r, size, a, scratch).ok());
      });
      for (int r = 1; r < size; ++r)
        ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(), count * sizeof(double)), 0)
            << "rank " << r << " differs from rank 0 at size " << size << " ring_min " << ring_min;
    }
  }
}

TEST(P2pCollectives, BroadcastFromEveryRootAndBarrier) {
  for (int size = 1; size <= 7; ++size) {
    for (int root = 0; root < size; ++root) {
      Fabric fabric(size);
      OnRanks(size, [&](int r) {
        ThreadTransport t(fabric, r, std::chrono::seconds(30));
        std::vector<int> buf(33, r == root ? 0 : -1);
        if (r == root)
          for (int i = 0; i < 33; ++i) buf[static_cast<std::size_t>(i)] = 1000 * root + i;
        Status s = P2pBroadcast(t, r, size, root, buf.data(), buf.size() * sizeof(int));
        EXPECT_TRUE(s.ok()) << s.ToString();
        for (int i = 0; i < 33; ++i) EXPECT_EQ(buf[static_cast<std::size_t>(i)], 1000 * root + i) << "rank " << r;
        s = P2pBarrier(t, r, size);
        EXPECT_TRUE(s.ok()) << s.ToString();
      });
      EXPECT_EQ(fabric.Pending(), 0u);
    }
  }
}

// A rank that never arrives: the others end with the transport's timeout instead of hanging.
TEST(P2pCollectives, AMissingRankEndsInTheTransportsError) {
  const int size = 4, missing = 2;
  Fabric fabric(size);
  OnRanks(size, [&](int r) {
    if (r == missing) return;
    ThreadTransport t(fabric, r, std::chrono::milliseconds(200));
    std::vector<float> buf(100, 1.0f);
    P2pAllreduceArgs a;
    a.buf = buf.data();
    a.count = buf.size();
    a.elem_size = sizeof(float);
    a.reduce = GetReduceFunction(DataType::kFloat32, ReduceKind::kSum);
    std::vector<char> scratch;
    Status s = P2pAllreduce(t, r, size, a, scratch);
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.ToString();
    s = P2pBarrier(t, r, size);
    EXPECT_FALSE(s.ok()) << "rank " << r;
  });
}

}  // namespace
}  // namespace commkit
