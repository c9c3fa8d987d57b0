// NcclComm/NcclEngine on a real GPU (label gpu): world size 1 in one process, plus a 2-rank
// communicator across two GPUs (threads) when available. Skips with the reason when no device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <thread>
#include <vector>

#include "commkit/comm/nccl/watchdog.h"
#include "nccl_comm.h"
#include "nccl_engine.h"
#include "nccl_fingerprint.h"
#include "nccl_gpu_support.h"

namespace commkit::comm::nccl {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<NcclEngine> MakeEngine(int device, const std::string& name,
                                       std::chrono::milliseconds timeout = 60s) {
  auto id = NcclComm::NewUniqueId();
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  if (!id.ok()) return nullptr;
  NcclCommConfig cfg;
  cfg.name = name;
  auto comm = NcclComm::InitRank(*id, 1, 0, device, cfg, Clock::now() + 120s, 10s);
  EXPECT_TRUE(comm.ok()) << comm.status().ToString();
  if (!comm.ok()) return nullptr;
  NcclEngineOptions o;
  o.timeout = timeout;
  return std::make_shared<NcclEngine>(std::move(*comm), o);
}

NcclCall AllReduce(float* buf, std::size_t n, ncclRedOp_t op) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclAllReduce(buf, buf, n, ncclFloat32, op, c, s)); };
}

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n) : count(n) { EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(float)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void Fill(const std::vector<float>& v) { ASSERT_EQ(cudaMemcpy(ptr, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<float> Read() {
    std::vector<float> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), ptr, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  float* ptr = nullptr;
  std::size_t count;
};

// A host function that blocks a stream until released: makes "not complete yet" deterministic.
struct StreamGate {
  ~StreamGate() {  // never leave a stream waiting on a destroyed gate (e.g. after a failed ASSERT)
    open = true;
    cudaDeviceSynchronize();
  }
  std::atomic<bool> open{false};
  static void CUDART_CB Wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    for (int i = 0; i < 600000 && !gate->open.load(); ++i) std::this_thread::sleep_for(100us);  // <= 60 s
  }
  void Block(cudaStream_t s) { ASSERT_EQ(cudaLaunchHostFunc(s, &StreamGate::Wait, this), cudaSuccess); }
};

TEST(NcclEngineGpuTest, AllReduceAndPreMulSumOnAGivenStream) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto engine = MakeEngine(0, "engine-ws1");
  ASSERT_NE(engine, nullptr);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer buf(1024);
  std::vector<float> in(1024);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  buf.Fill(in);
  auto work = engine->Enqueue("allreduce", stream, {AllReduce(buf.ptr, buf.count, ncclSum)}, {}, 0ms);
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  ASSERT_TRUE((*work)->Synchronize(60s).ok());
  EXPECT_EQ(buf.Read(), in);  // world size 1: sum is the identity

  // PREMUL_SUM: x * 3 summed over one rank.
  float scalar = 3.0f;
  ncclRedOp_t premul;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate,
                                     engine->comm().raw()), ncclSuccess);
  work = engine->Enqueue("allreduce(premul_sum)", stream, {AllReduce(buf.ptr, buf.count, premul)},
                         {[premul](ncclComm_t c) { ncclRedOpDestroy(premul, c); }}, 0ms);
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  ASSERT_TRUE((*work)->Synchronize(60s).ok());
  auto out = buf.Read();
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] * 3.0f) << i;
  cudaStreamDestroy(stream);
}

TEST(NcclEngineGpuTest, WaitOrdersAnotherStreamWithoutBlockingTheCpu) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto engine = MakeEngine(0, "engine-streams");
  ASSERT_NE(engine, nullptr);
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer buf(256);
  DeviceBuffer copy(256);
  buf.Fill(std::vector<float>(256, 2.0f));
  copy.Fill(std::vector<float>(256, 0.0f));
  StreamGate gate;
  gate.Block(a);
  float scalar = 5.0f;
  ncclRedOp_t premul;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate,
                                     engine->comm().raw()), ncclSuccess);
  auto work = engine->Enqueue("allreduce", a, {AllReduce(buf.ptr, buf.count, premul)},
                              {[premul](ncclComm_t c) { ncclRedOpDestroy(premul, c); }}, 0ms);
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  EXPECT_FALSE((*work)->Poll());                      // gated: not complete
  EXPECT_TRUE((*work)->WaitOnStream(b).ok());         // returns although the work is pending
  ASSERT_EQ(cudaMemcpyAsync(copy.ptr, buf.ptr, 256 * 4, cudaMemcpyDeviceToDevice, b), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);  // b waits for the gated collective
  EXPECT_EQ((*work)->Synchronize(10ms).code(), StatusCode::kTimeout);  // bounded CPU wait
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  for (float v : copy.Read()) ASSERT_EQ(v, 10.0f);  // b saw the result, not the input
  EXPECT_TRUE((*work)->Synchronize(60s).ok());
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST(NcclEngineGpuTest, CoalescedOpsFormOneWork) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto engine = MakeEngine(0, "engine-coalesce");
  ASSERT_NE(engine, nullptr);
  DeviceBuffer x(64);
  DeviceBuffer y(64);
  x.Fill(std::vector<float>(64, 1.0f));
  y.Fill(std::vector<float>(64, 2.0f));
  ASSERT_TRUE(engine->StartCoalescing().ok());
  EXPECT_EQ(engine->StartCoalescing().code(), StatusCode::kInvalidArgument);
  auto w1 = engine->Enqueue("allreduce", nullptr, {AllReduce(x.ptr, 64, ncclMax)}, {}, 0ms);
  auto w2 = engine->Enqueue("allreduce", nullptr, {AllReduce(y.ptr, 64, ncclMin)}, {}, 0ms);
  ASSERT_TRUE(w1.ok() && w2.ok());
  EXPECT_EQ(*w1, nullptr);  // queued, not issued
  EXPECT_EQ(engine->pending(), 0u);
  auto w = engine->EndCoalescing(0ms);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_NE(*w, nullptr);
  EXPECT_NE((*w)->op().find("coalesced[allreduce,allreduce]"), std::string::npos) << (*w)->op();
  EXPECT_TRUE((*w)->Synchronize(60s).ok());
  EXPECT_EQ(x.Read(), std::vector<float>(64, 1.0f));
  EXPECT_EQ(y.Read(), std::vector<float>(64, 2.0f));
  EXPECT_EQ(engine->EndCoalescing(0ms).status().code(), StatusCode::kInvalidArgument);
}

TEST(NcclEngineGpuTest, SeveralCommunicatorsAndStreamsInOneProcess) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto e1 = MakeEngine(0, "comm-a");
  auto e2 = MakeEngine(0, "comm-b");
  ASSERT_NE(e1, nullptr);
  ASSERT_NE(e2, nullptr);
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer a(4096);
  DeviceBuffer b(4096);
  a.Fill(std::vector<float>(4096, 7.0f));
  b.Fill(std::vector<float>(4096, 9.0f));
  std::vector<std::shared_ptr<NcclWorkState>> works;
  for (int i = 0; i < 20; ++i) {
    auto w1 = e1->Enqueue("allreduce", s1, {AllReduce(a.ptr, a.count, ncclSum)}, {}, 0ms);
    auto w2 = e2->Enqueue("allreduce", s2, {AllReduce(b.ptr, b.count, ncclSum)}, {}, 0ms);
    ASSERT_TRUE(w1.ok() && w2.ok());
    works.push_back(*w1);
    works.push_back(*w2);
  }
  for (auto& w : works) ASSERT_TRUE(w->Synchronize(60s).ok());
  EXPECT_EQ(a.Read(), std::vector<float>(4096, 7.0f));
  EXPECT_EQ(b.Read(), std::vector<float>(4096, 9.0f));
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

TEST(NcclEngineGpuTest, TwoRanksOnTwoGpusInOneProcess) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs (one rank per GPU); found " << devices;
  auto id = NcclComm::NewUniqueId();
  ASSERT_TRUE(id.ok());
  std::vector<std::vector<float>> results(2);
  std::vector<Status> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclCommConfig cfg;
      cfg.name = "two-gpu";
      auto comm = NcclComm::InitRank(*id, 2, r, r, cfg, Clock::now() + 120s, 10s);
      if (!comm.ok()) { errors[r] = comm.status(); return; }
      auto engine = std::make_shared<NcclEngine>(std::move(*comm), NcclEngineOptions{});
      DeviceBuffer buf(128);
      buf.Fill(std::vector<float>(128, static_cast<float>(r + 1)));
      auto w = engine->Enqueue("allreduce", nullptr, {AllReduce(buf.ptr, 128, ncclSum)}, {}, 0ms);
      if (!w.ok()) { errors[r] = w.status(); return; }
      errors[r] = (*w)->Synchronize(60s);
      results[r] = buf.Read();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r].ok()) << errors[r].ToString();
    EXPECT_EQ(results[r], std::vector<float>(128, 3.0f));
  }
}

TEST(NcclEngineGpuTest, WatchdogTimesOutAbortsAndFailsPendingWork) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto engine = MakeEngine(0, "engine-timeout", 100ms);
  ASSERT_NE(engine, nullptr);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer buf(64);
  StreamGate gate;
  gate.Block(s);
  std::atomic<int> aborts{0};
  WatchdogOptions wo;
  wo.poll_interval = 5ms;
  wo.abort_deadline = 30s;
  // Open the gate before aborting so the queued kernel never runs on a torn-down communicator.
  wo.group_abort = [&](const std::vector<std::shared_ptr<Watched>>& victims) {
    gate.open = true;
    cudaStreamSynchronize(s);
    for (auto& v : victims) v->Abort();
    ++aborts;
  };
  Watchdog dog(wo);
  dog.Watch(engine);
  auto work = engine->Enqueue("allreduce", s, {AllReduce(buf.ptr, 64, ncclSum)}, {}, 0ms);
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  Status st;
  for (int i = 0; i < 600 && st.ok(); ++i) {  // bounded: 60 s
    st = (*work)->Synchronize(100ms);
    if (st.code() == StatusCode::kTimeout && st.message().find("ran past") == std::string::npos) st = Status();
  }
  // The gate opens only in the abort hook, and the engine fails the timed-out work before the
  // watchdog aborts: the work must carry the typed timeout.
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.ToString();
  EXPECT_NE(st.message().find("ran past its timeout"), std::string::npos) << st.message();
  for (int i = 0; i < 600 && aborts.load() == 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(aborts.load(), 1);
  EXPECT_TRUE(engine->comm().aborted());
  auto refused = engine->Enqueue("allreduce", s, {AllReduce(buf.ptr, 64, ncclSum)}, {}, 0ms);
  EXPECT_EQ(refused.status().code(), StatusCode::kTimeout);
  EXPECT_NE(refused.status().message().find("failed earlier"), std::string::npos);
  cudaStreamDestroy(s);
}

// The fingerprint check fused into a collective's group, on mapped pinned host memory: at world size
// 1 it always agrees, its result is readable without a copy, and slots are reused (more works than
// one chunk holds).
TEST(NcclEngineGpuTest, FingerprintCheckInTheCollectivesGroupAgrees) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  auto engine = MakeEngine(0, "engine-fingerprint");
  ASSERT_NE(engine, nullptr);
  auto slots = std::make_shared<FingerprintSlots>(0);
  DeviceBuffer buf(32);
  buf.Fill(std::vector<float>(32, 2.0f));
  const std::size_t rounds = FingerprintSlots::kSlotsPerChunk + 44;
  for (std::size_t i = 0; i < rounds; ++i) {
    auto check = slots->Acquire(0x1234'5678'9abc'def0ull + i);
    ASSERT_TRUE(check.ok()) << check.status().ToString();
    auto work = engine->Enqueue("allreduce", nullptr, {(*check)->Call(), AllReduce(buf.ptr, 32, ncclSum)}, {}, 0ms, *check);
    ASSERT_TRUE(work.ok()) << work.status().ToString();
    Status st = (*work)->Synchronize(60s);
    ASSERT_TRUE(st.ok()) << "round " << i << ": " << st.ToString();
    EXPECT_EQ((*check)->Verdict(), FingerprintVerdict::kAgree);
  }
  EXPECT_EQ(buf.Read(), std::vector<float>(32, 2.0f));
  EXPECT_EQ(slots->capacity(), FingerprintSlots::kSlotsPerChunk) << "finished works give their slots back";
}

// Two ranks on two GPUs whose fingerprints differ while the collective itself completes (same size):
// both works end with kMismatch once their event fired.
TEST(NcclEngineGpuTest, DifferentFingerprintsFailBothRanksAtCompletion) {
  COMMKIT_REQUIRE_GPU_OR_SKIP(devices);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs (one rank per GPU); found " << devices;
  auto id = NcclComm::NewUniqueId();
  ASSERT_TRUE(id.ok());
  std::vector<Status> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclCommConfig cfg;
      cfg.name = "two-gpu-fingerprint";
      auto comm = NcclComm::InitRank(*id, 2, r, r, cfg, Clock::now() + 120s, 10s);
      if (!comm.ok()) { errors[r] = comm.status(); return; }
      auto engine = std::make_shared<NcclEngine>(std::move(*comm), NcclEngineOptions{});
      auto slots = std::make_shared<FingerprintSlots>(r);
      DeviceBuffer buf(128);
      buf.Fill(std::vector<float>(128, 1.0f));
      auto check = slots->Acquire(1000 + 2 * static_cast<std::uint64_t>(r));
      if (!check.ok()) { errors[r] = check.status(); return; }
      auto w = engine->Enqueue("allreduce", nullptr, {(*check)->Call(), AllReduce(buf.ptr, 128, ncclSum)}, {}, 0ms, *check);
      if (!w.ok()) { errors[r] = w.status(); return; }
      errors[r] = (*w)->Synchronize(60s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].code(), StatusCode::kMismatch) << "rank " << r << ": " << errors[r].ToString();
    EXPECT_NE(errors[r].message().find("fingerprint check"), std::string::npos) << errors[r].message();
  }
}

}  // namespace
}  // namespace commkit::comm::nccl
