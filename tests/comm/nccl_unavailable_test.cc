// On a machine without a driver or GPU (the CI here), the NCCL backend reports Unavailable with the
// reason and never crashes. On a GPU machine the probe succeeds and these tests check its answer.
#include <gtest/gtest.h>

#include <string>

#include "commkit/comm/nccl/nccl_runtime.h"

namespace commkit::comm::nccl {
namespace {

TEST(NcclUnavailableTest, ProbeReturnsInfoOrUnavailableWithReason) {
  auto info = ProbeNcclRuntime();
  if (info.ok()) {
    EXPECT_GT(info->device_count, 0);
    EXPECT_GT(info->nccl_version, 0);
    EXPECT_GT(info->driver_version, 0);
    EXPECT_FALSE(info->ToString().empty());
    return;
  }
  EXPECT_EQ(info.status().code(), StatusCode::kUnavailable) << info.status().ToString();
  const std::string& m = info.status().message();
  bool names_reason = m.find("libcuda") != std::string::npos ||
                      m.find("no CUDA device") != std::string::npos ||
                      m.find("CUDA_VISIBLE_DEVICES") != std::string::npos;
  EXPECT_TRUE(names_reason) << m;
}

TEST(NcclUnavailableTest, ProbeIsRepeatable) {
  auto a = ProbeNcclRuntime();
  auto b = ProbeNcclRuntime();
  EXPECT_EQ(a.ok(), b.ok());
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), b.status().code());
  }
}

}  // namespace
}  // namespace commkit::comm::nccl

#if defined(COMMKIT_NCCL_HAS_BACKEND)
#include "commkit/comm/hash_store.h"
#include "commkit/comm/nccl/nccl_backend.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/process_group.h"

namespace commkit::comm::nccl {
namespace {

TEST(NcclUnavailableTest, CreateBackendIsUnavailableWithoutGpuAndNeverCrashes) {
  BackendContext ctx;
  ctx.store = std::make_shared<HashStore>();
  ctx.timeout = std::chrono::seconds(5);
  auto backend = CreateNcclBackend(ctx);
  auto probe = ProbeNcclRuntime();
  if (probe.ok()) GTEST_SKIP() << "a GPU is present; the gpu tests cover creation";
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(backend.status().message(), probe.status().message());
  BackendInfo info = NcclBackendInfo();
  EXPECT_EQ(info.name, "nccl");
  EXPECT_EQ(info.memory, MemoryKind::kDevice);
  EXPECT_FALSE(info.available);
  EXPECT_NE(info.reason.find("libcuda"), std::string::npos) << info.reason;
  ASSERT_TRUE(info.create);
  EXPECT_EQ(info.create(ctx).status().code(), StatusCode::kUnavailable);
}

TEST(NcclUnavailableTest, ProcessGroupThroughRegistryReportsUnavailable) {
  if (ProbeNcclRuntime().ok()) GTEST_SKIP() << "a GPU is present; the gpu tests cover creation";
  // Registered by Registry::Default() itself through commkit_register_nccl_backend (dlsym).
  bool auto_registered = false;
  for (const auto& b : Registry::Default().List()) {
    auto_registered |= (b.name == "nccl" && b.reason.find("not linked") == std::string::npos);
  }
  EXPECT_TRUE(auto_registered);
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.memory = MemoryKind::kDevice;
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, o);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), StatusCode::kUnavailable) << pg.status().ToString();
  EXPECT_NE(pg.status().message().find("libcuda"), std::string::npos) << pg.status().message();
  bool listed = false;
  for (const auto& b : Registry::Default().List()) listed |= (b.name == "nccl" && !b.available);
  EXPECT_TRUE(listed);
}

TEST(NcclUnavailableTest, SupportsTable) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kInt8, DataType::kUInt8, DataType::kInt32, DataType::kInt64}) {
    for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMin, ReduceKind::kMax,
                         ReduceKind::kAvg, ReduceKind::kPreMulSum}) {
      EXPECT_TRUE(NcclSupports(CollectiveKind::kAllreduce, t, MemoryKind::kDevice, k));
      EXPECT_TRUE(NcclSupports(CollectiveKind::kReduceScatterV, t, MemoryKind::kDevice, k));
    }
    for (ReduceKind k : {ReduceKind::kBand, ReduceKind::kBor, ReduceKind::kBxor}) {
      EXPECT_FALSE(NcclSupports(CollectiveKind::kAllreduce, t, MemoryKind::kDevice, k));
      EXPECT_FALSE(NcclSupports(CollectiveKind::kReduce, t, MemoryKind::kDevice, k));
      // Non-reducing collectives ignore the op.
      EXPECT_TRUE(NcclSupports(CollectiveKind::kAllgather, t, MemoryKind::kDevice, k));
    }
  }
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    auto kind = static_cast<CollectiveKind>(k);
    EXPECT_TRUE(NcclSupports(kind, DataType::kFloat32, MemoryKind::kDevice, ReduceKind::kSum));
    EXPECT_FALSE(NcclSupports(kind, DataType::kFloat32, MemoryKind::kHost, ReduceKind::kSum));
  }
}

TEST(NcclUnavailableTest, ExtrasRejectOtherBackendsAndWorks) {
  class Fake : public Backend {
   public:
    std::string_view Name() const override { return "fake"; }
    bool Supports(CollectiveKind, DataType, MemoryKind, ReduceKind) const override { return true; }
    Result<std::unique_ptr<Work>> Run(const CollectiveArgs&) override { return Status::Internal("unused"); }
    Result<std::unique_ptr<Backend>> Split(const BackendContext&, int, int) override { return Status::Internal("unused"); }
    void Abort(std::string_view) override {}
  } fake;
  EXPECT_EQ(NcclStartCoalescing(fake).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclEndCoalescing(fake).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace commkit::comm::nccl
#endif  // COMMKIT_NCCL_HAS_BACKEND
