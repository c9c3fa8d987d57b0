// The NCCL Backend on real GPUs (label gpu). Runs at world size 1 in-process (HashStore), or with
// P ranks when launched by commkit-run (one GPU per rank; tools/gpu-check.sh does this with >= 2
// GPUs). Every check is written for any P. Skips with the probe's reason when no device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "commkit/comm/hash_store.h"
#include "commkit/comm/nccl/nccl_backend.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/process_group.h"
#include "commkit/comm/rendezvous.h"
#include "nccl_gpu_support.h"

namespace commkit::comm::nccl {
namespace {

using namespace std::chrono_literals;

template <typename T>
struct Dev {
  explicit Dev(std::size_t n, T fill = T{}) : count(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(1, n) * sizeof(T)), cudaSuccess);
    Set(std::vector<T>(n, fill));
  }
  ~Dev() { cudaFree(ptr); }
  void Set(const std::vector<T>& v) {
    if (!v.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<T> Get() {
    std::vector<T> v(count);
    if (count) {
      EXPECT_EQ(cudaMemcpy(v.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }
  T* ptr = nullptr;
  std::size_t count;
};

class NcclBackendGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::RequireGpu();
    if (devices_ == 0) GTEST_SKIP() << "no usable GPU: " << ProbeNcclRuntime().status().ToString();
    BackendContext ctx;
    ctx.timeout = 120s;
    ctx.group_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (std::getenv("WORLD_SIZE") != nullptr) {  // launched by commkit-run / torchrun
      // One rendezvous per process; each test's backend gets a fresh unique-id generation.
      static Result<Rendezvous> rdv = RendezvousFromEnvironment();
      ASSERT_TRUE(rdv.ok()) << rdv.status().ToString();
      ctx.rank = rdv->info.rank;
      ctx.size = rdv->info.world_size;
      ctx.store = rdv->store;
    } else {
      ctx.store = std::make_shared<HashStore>();
    }
    context_ = ctx;
    auto backend = CreateNcclBackend(ctx);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(*backend);
    P = ctx.size;
    r = ctx.rank;
  }

  CollectiveArgs Args(CollectiveKind kind, DataType dtype = DataType::kFloat32) {
    CollectiveArgs a;
    a.kind = kind;
    a.dtype = dtype;
    a.memory = MemoryKind::kDevice;
    a.sequence = ++seq_;
    return a;
  }
  void RunOk(const CollectiveArgs& a) {
    auto w = backend_->Run(a);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    Status s = (*w)->Synchronize(120s);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE((*w)->Test());
    EXPECT_EQ((*w)->Sequence(), a.sequence);
  }

  int devices_ = 0;
  int P = 1;
  int r = 0;
  std::uint64_t seq_ = 0;
  BackendContext context_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(NcclBackendGpuTest, SupportsAnswersUpFront) {
  EXPECT_EQ(backend_->Name(), "nccl");
  EXPECT_TRUE(backend_->Supports(CollectiveKind::kAllreduce, DataType::kBFloat16, MemoryKind::kDevice, ReduceKind::kAvg));
  EXPECT_FALSE(backend_->Supports(CollectiveKind::kAllreduce, DataType::kInt32, MemoryKind::kDevice, ReduceKind::kBand));
  EXPECT_FALSE(backend_->Supports(CollectiveKind::kAllreduce, DataType::kFloat32, MemoryKind::kHost, ReduceKind::kSum));
  auto a = Args(CollectiveKind::kAllreduce, DataType::kInt32);
  a.op = ReduceOp::Bxor();
  Dev<std::int32_t> buf(4);
  a.recv = buf.ptr;
  a.count = 4;
  EXPECT_EQ(backend_->Run(a).status().code(), StatusCode::kNotSupported);
}

TEST_F(NcclBackendGpuTest, AllreduceOpsAndTypes) {
  const std::size_t n = 1000;
  {
    Dev<float> buf(n, static_cast<float>(r + 1));
    auto a = Args(CollectiveKind::kAllreduce);
    a.recv = buf.ptr;
    a.count = n;
    RunOk(a);  // in place, SUM
    for (float v : buf.Get()) ASSERT_EQ(v, P * (P + 1) / 2.0f);
    buf.Set(std::vector<float>(n, static_cast<float>(r + 1)));
    a.op = ReduceOp::PreMulSum(0.5);
    a.sequence = ++seq_;
    RunOk(a);
    for (float v : buf.Get()) ASSERT_EQ(v, P * (P + 1) / 4.0f);
    buf.Set(std::vector<float>(n, static_cast<float>(r + 1)));
    a.op = ReduceOp::Avg();
    a.sequence = ++seq_;
    RunOk(a);
    for (float v : buf.Get()) ASSERT_FLOAT_EQ(v, (P + 1) / 2.0f);
  }
  {
    Dev<std::int64_t> in(n, r + 1);
    Dev<std::int64_t> out(n, -1);
    for (auto [op, expect] : std::vector<std::pair<ReduceOp, std::int64_t>>{
             {ReduceOp::Max(), P}, {ReduceOp::Min(), 1}, {ReduceOp::Sum(), P * (P + 1) / 2}}) {
      auto a = Args(CollectiveKind::kAllreduce, DataType::kInt64);
      a.send = in.ptr;
      a.recv = out.ptr;
      a.count = n;
      a.op = op;
      RunOk(a);
      for (auto v : out.Get()) ASSERT_EQ(v, expect) << op.ToString();
    }
  }
  {
    // f16 1.0 (0x3c00) summed over P ranks is exactly P for small P.
    Dev<std::uint16_t> h(n, 0x3c00);
    auto a = Args(CollectiveKind::kAllreduce, DataType::kFloat16);
    a.recv = h.ptr;
    a.count = n;
    a.op = ReduceOp::PreMulSum(2.0);
    RunOk(a);
    std::uint16_t expect = P == 1 ? 0x4000 : (P == 2 ? 0x4400 : 0);  // 2.0, 4.0
    if (expect != 0) {
      for (auto v : h.Get()) ASSERT_EQ(v, expect);
    }
  }
}

TEST_F(NcclBackendGpuTest, BroadcastReduceGatherScatter) {
  const std::size_t n = 64;
  Dev<float> buf(n, static_cast<float>(r));
  auto b = Args(CollectiveKind::kBroadcast);
  b.recv = buf.ptr;
  b.count = n;
  b.root = P - 1;
  RunOk(b);
  for (float v : buf.Get()) ASSERT_EQ(v, static_cast<float>(P - 1));

  Dev<float> in(n, static_cast<float>(r + 1));
  Dev<float> out(n, -1.0f);
  auto red = Args(CollectiveKind::kReduce);
  red.send = in.ptr;
  red.recv = out.ptr;
  red.count = n;
  red.root = 0;
  RunOk(red);
  if (r == 0) {
    for (float v : out.Get()) ASSERT_EQ(v, P * (P + 1) / 2.0f);
  }

  Dev<float> gathered(n * P, -1.0f);
  auto g = Args(CollectiveKind::kGather);
  g.send = in.ptr;
  g.recv = gathered.ptr;
  g.count = n;
  g.root = 0;
  RunOk(g);
  if (r == 0) {
    auto v = gathered.Get();
    for (int p = 0; p < P; ++p) ASSERT_EQ(v[p * n], static_cast<float>(p + 1));
  }

  std::vector<float> blocks(n * P);
  for (int p = 0; p < P; ++p) std::fill_n(blocks.begin() + p * n, n, static_cast<float>(10 * p));
  Dev<float> src(n * P);
  src.Set(blocks);
  Dev<float> mine(n, -1.0f);
  auto s = Args(CollectiveKind::kScatter);
  s.send = src.ptr;
  s.recv = mine.ptr;
  s.count = n;
  s.root = 0;
  RunOk(s);
  for (float v : mine.Get()) ASSERT_EQ(v, static_cast<float>(10 * r));
}

TEST_F(NcclBackendGpuTest, AllgatherReduceScatterAlltoallAndVVariants) {
  const std::size_t n = 16;
  Dev<std::int32_t> in(n, r);
  Dev<std::int32_t> all(n * P, -1);
  auto ag = Args(CollectiveKind::kAllgather, DataType::kInt32);
  ag.send = in.ptr;
  ag.recv = all.ptr;
  ag.count = n;
  RunOk(ag);
  auto v = all.Get();
  for (int p = 0; p < P; ++p) ASSERT_EQ(v[p * n + n - 1], p);

  Dev<std::int32_t> big(n * P, r + 1);
  Dev<std::int32_t> part(n, -1);
  auto rs = Args(CollectiveKind::kReduceScatter, DataType::kInt32);
  rs.send = big.ptr;
  rs.recv = part.ptr;
  rs.count = n;
  RunOk(rs);
  for (auto x : part.Get()) ASSERT_EQ(x, P * (P + 1) / 2);

  std::vector<std::int32_t> send(n * P);
  for (int p = 0; p < P; ++p) std::fill_n(send.begin() + p * n, n, r * 100 + p);
  Dev<std::int32_t> s(n * P);
  s.Set(send);
  Dev<std::int32_t> rcv(n * P, -1);
  auto a2a = Args(CollectiveKind::kAlltoall, DataType::kInt32);
  a2a.send = s.ptr;
  a2a.recv = rcv.ptr;
  a2a.count = n;
  RunOk(a2a);
  v = rcv.Get();
  for (int p = 0; p < P; ++p) ASSERT_EQ(v[p * n], p * 100 + r);

  // allgatherv: rank p contributes p + 1 elements of value p.
  std::vector<std::size_t> counts(P);
  for (int p = 0; p < P; ++p) counts[p] = p + 1;
  std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  Dev<std::int32_t> vin(counts[r], r);
  Dev<std::int32_t> vout(total, -1);
  auto agv = Args(CollectiveKind::kAllgatherv, DataType::kInt32);
  agv.send = vin.ptr;
  agv.recv = vout.ptr;
  agv.counts = counts;
  RunOk(agv);
  v = vout.Get();
  std::size_t off = 0;
  for (int p = 0; p < P; ++p) {
    for (std::size_t i = 0; i < counts[p]; ++i) ASSERT_EQ(v[off + i], p);
    off += counts[p];
  }

  // reduce_scatter_v: every rank sends `total` ones; rank p gets counts[p] elements equal to P.
  Dev<std::int32_t> rsv_in(total, 1);
  Dev<std::int32_t> rsv_out(counts[r], -1);
  auto rsv = Args(CollectiveKind::kReduceScatterV, DataType::kInt32);
  rsv.send = rsv_in.ptr;
  rsv.recv = rsv_out.ptr;
  rsv.counts = counts;
  RunOk(rsv);
  for (auto x : rsv_out.Get()) ASSERT_EQ(x, P);

  // alltoallv: send p + 1 elements of value r to rank p; receive r + 1 elements from each rank.
  std::vector<std::size_t> rcounts(P, static_cast<std::size_t>(r + 1));
  Dev<std::int32_t> avin(total, r);
  Dev<std::int32_t> avout((r + 1) * P, -1);
  auto av = Args(CollectiveKind::kAlltoallv, DataType::kInt32);
  av.send = avin.ptr;
  av.recv = avout.ptr;
  av.counts = counts;
  av.recv_counts = rcounts;
  RunOk(av);
  v = avout.Get();
  for (int p = 0; p < P; ++p) ASSERT_EQ(v[p * (r + 1)], p);
}

TEST_F(NcclBackendGpuTest, BarrierAndCoalescedSendRecv) {
  RunOk(Args(CollectiveKind::kBarrier));
  // Ring exchange (self exchange at P = 1), coalesced into one group as NCCL requires for self p2p.
  const std::size_t n = 32;
  Dev<float> out(n, static_cast<float>(r));
  Dev<float> in(n, -1.0f);
  ASSERT_TRUE(NcclStartCoalescing(*backend_).ok());
  auto s = Args(CollectiveKind::kSend);
  s.send = out.ptr;
  s.count = n;
  s.peer = (r + 1) % P;
  auto rv = Args(CollectiveKind::kRecv);
  rv.recv = in.ptr;
  rv.count = n;
  rv.peer = (r + P - 1) % P;
  auto w1 = backend_->Run(s);
  auto w2 = backend_->Run(rv);
  ASSERT_TRUE(w1.ok() && w2.ok());
  EXPECT_FALSE((*w1)->Test());  // not issued before the end of the block
  auto all = NcclEndCoalescing(*backend_);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_TRUE((*all)->Synchronize(120s).ok());
  EXPECT_TRUE((*w1)->Test());
  EXPECT_TRUE((*w2)->Wait(1s).ok());
  for (float x : in.Get()) ASSERT_EQ(x, static_cast<float>((r + P - 1) % P));
}

TEST_F(NcclBackendGpuTest, WaitMakesAnotherStreamWait) {
  cudaStream_t mine, other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  const std::size_t n = 1 << 20;
  Dev<float> buf(n, 1.0f);
  Dev<float> copy(n, 0.0f);
  auto a = Args(CollectiveKind::kAllreduce);
  a.recv = buf.ptr;
  a.count = n;
  a.stream = mine;
  auto w = backend_->Run(a);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE((*w)->Wait(1s).ok());  // own stream: already ordered, returns at once
  ASSERT_TRUE(NcclWaitOnStream(**w, other).ok());
  ASSERT_EQ(cudaMemcpyAsync(copy.ptr, buf.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice, other), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  for (float x : copy.Get()) ASSERT_EQ(x, static_cast<float>(P));
  EXPECT_TRUE((*w)->Test());
  EXPECT_GT((*w)->Duration().count(), 0);
  cudaStreamDestroy(mine);
  cudaStreamDestroy(other);
}

TEST_F(NcclBackendGpuTest, AbortFailsLaterOpsWithTypedError) {
  backend_->Abort("test abort");
  Dev<float> buf(4, 1.0f);
  auto a = Args(CollectiveKind::kAllreduce);
  a.recv = buf.ptr;
  a.count = 4;
  auto w = backend_->Run(a);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kAborted) << w.status().ToString();
  EXPECT_NE(w.status().message().find("test abort"), std::string::npos);
}

TEST_F(NcclBackendGpuTest, SplitIntoSingletons) {
  BackendContext child = context_;
  child.rank = 0;
  child.size = 1;
  child.group_name = "singleton";
  auto sub = backend_->Split(child, /*color=*/r, /*key=*/0);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_NE(*sub, nullptr);
  Dev<float> buf(8, 3.0f);
  CollectiveArgs a = Args(CollectiveKind::kAllreduce);
  a.recv = buf.ptr;
  a.count = 8;
  auto w = (*sub)->Run(a);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Synchronize(120s).ok());
  for (float x : buf.Get()) ASSERT_EQ(x, 3.0f);
}

// Through the public ProcessGroup (validation, sequence numbers, mismatch checks) at world size 1.
TEST(NcclProcessGroupGpuTest, AllreduceAndBroadcastThroughProcessGroup) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  if (std::getenv("WORLD_SIZE") != nullptr) GTEST_SKIP() << "world-size-1 test";
  Registry::Default().Register(NcclBackendInfo());
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.memory = MemoryKind::kDevice;
  o.timeout = 120s;
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, o);
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_EQ((*pg)->backend_name(), "nccl");
  EXPECT_FALSE((*pg)->Supports(CollectiveKind::kAllreduce, DataType::kInt32, MemoryKind::kDevice, ReduceOp::Band()));
  OpOptions dev;
  dev.memory = MemoryKind::kDevice;
  Dev<float> buf(100, 4.0f);
  auto w = (*pg)->Allreduce(nullptr, buf.ptr, 100, DataType::kFloat32, ReduceOp::PreMulSum(0.25), dev);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Synchronize(120s).ok());
  for (float x : buf.Get()) ASSERT_EQ(x, 1.0f);
  auto b = (*pg)->Broadcast(buf.ptr, 100, DataType::kFloat32, 0, dev);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*b)->Synchronize(120s).ok());
  auto bad = (*pg)->Allreduce(nullptr, buf.ptr, 100, DataType::kInt32, ReduceOp::Bxor(), dev);
  EXPECT_EQ(bad.status().code(), StatusCode::kNotSupported);
}

// Mismatched collectives through the ProcessGroup on P >= 2 ranks (one GPU each, launched by
// commkit-run): the fingerprint check rides in each collective's NCCL group, nothing goes through the
// store per call, and a difference fails the Work at completion with every rank's call.
TEST_F(NcclBackendGpuTest, MismatchThroughProcessGroupFailsWithThePerRankDiff) {
  if (P < 2) GTEST_SKIP() << "a mismatch needs two ranks: run with WORLD_SIZE >= 2, one GPU per rank";
  Registry::Default().Register(NcclBackendInfo());
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.memory = MemoryKind::kDevice;
  o.timeout = 20s;
  o.name = "mismatch";
  auto pg = ProcessGroup::Create(std::make_shared<PrefixStore>("pg-mismatch-test", context_.store), r, P, o);
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  Dev<float> buf(64, 1.0f);
  auto ok = (*pg)->Allreduce(nullptr, buf.ptr, 64, DataType::kFloat32, ReduceOp::Sum());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_TRUE((*ok)->Synchronize(120s).ok());
  for (float x : buf.Get()) ASSERT_EQ(x, static_cast<float>(P));

  // Same size, different op: the collective completes, the check disagrees.
  auto w = (*pg)->Allreduce(nullptr, buf.ptr, 64, DataType::kFloat32, r == 1 ? ReduceOp::Max() : ReduceOp::Sum());
  ASSERT_TRUE(w.ok()) << "the check never blocks the submission: " << w.status().ToString();
  Status s = (*w)->Synchronize(120s);
  ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
  EXPECT_NE(s.message().find("rank 1: allreduce f32 max count=64"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0: allreduce f32 sum count=64"), std::string::npos) << s.message();

  // The communicator is fine after it.
  buf.Set(std::vector<float>(64, 1.0f));
  auto again = (*pg)->Allreduce(nullptr, buf.ptr, 64, DataType::kFloat32, ReduceOp::Sum());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE((*again)->Synchronize(120s).ok());
  for (float x : buf.Get()) ASSERT_EQ(x, static_cast<float>(P));

  // Different sizes: the collective may hang; the watchdog's timeout still reports the mismatch
  // (from the check's result when it completed, else from the ranks' calls compared in the store).
  auto hang = (*pg)->Allreduce(nullptr, buf.ptr, r == 1 ? 32 : 64, DataType::kFloat32, ReduceOp::Sum());
  ASSERT_TRUE(hang.ok()) << hang.status().ToString();
  s = (*hang)->Synchronize(120s);
  ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
  EXPECT_NE(s.message().find("rank 1: allreduce f32 sum count=32"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0: allreduce f32 sum count=64"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace commkit::comm::nccl
