// Mismatch detection for backends that cannot reduce host memory (NCCL): fingerprints go through the
// store. Exercised with a delegating backend over gloo that declines host i64 MAX all-reduces.
#include <atomic>

#include "commkit/comm/registry.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

class NoHostMaxBackend final : public Backend {
 public:
  explicit NoHostMaxBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return "nohostmax"; }
  bool Supports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op) const override {
    if (kind == CollectiveKind::kAllreduce && dtype == DataType::kInt64 && op == ReduceKind::kMax) return false;
    return inner_->Supports(kind, dtype, memory, op);
  }
  Result<std::unique_ptr<Work>> Run(const CollectiveArgs& args) override { return inner_->Run(args); }
  Result<std::unique_ptr<Backend>> Split(const BackendContext& c, int color, int key) override {
    COMMKIT_ASSIGN_OR_RETURN(auto b, inner_->Split(c, color, key));
    if (b == nullptr) return std::unique_ptr<Backend>();
    return std::unique_ptr<Backend>(new NoHostMaxBackend(std::move(b)));
  }
  void Abort(std::string_view reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Backend> inner_;
};

void RegisterNoHostMax() {
  BackendInfo info;
  info.name = "nohostmax";
  info.available = true;
  info.create = [](const BackendContext& ctx) -> Result<std::unique_ptr<Backend>> {
    COMMKIT_ASSIGN_OR_RETURN(auto gloo, Registry::Default().Create("gloo", MemoryKind::kHost, ctx));
    return std::unique_ptr<Backend>(new NoHostMaxBackend(std::move(gloo)));
  };
  Registry::Default().Register(std::move(info));
}

TEST(PgStoreFingerprint, AgreeingCallsPassAndMismatchesAreReportedWithADiff) {
  RegisterNoHostMax();
  std::atomic<int> reported{0};
  RunRanks("nohostmax", 3, [&](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    for (int i = 0; i < 5; ++i)
      COMMKIT_ASSERT_OK((*pg.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::Sum()))->Wait());
    std::size_t n = pg.rank() == 1 ? 5 : 8;
    auto work = pg.Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("allreduce #6"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: allreduce f32 sum count=5"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 2: allreduce f32 sum count=8"), std::string::npos) << s.message();
    ++reported;
  });
  EXPECT_EQ(reported.load(), 3);
}

TEST(PgStoreFingerprint, AMissingRankIsNamed) {
  RegisterNoHostMax();
  RunRanks("nohostmax", 2, [&](ProcessGroup& pg) {
    std::int32_t v = 1;
    COMMKIT_ASSERT_OK((*pg.Broadcast(&v, 1, DataType::kInt32, 0))->Wait());
    if (pg.rank() == 1) {
      std::this_thread::sleep_for(3s);
      return;
    }
    auto work = pg.Broadcast(&v, 1, DataType::kInt32, 0, {.timeout = 1s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("broadcast #2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("ranks that never reached broadcast #2: 1 (last at #1"), std::string::npos)
        << s.message();
  });
}

}  // namespace
}  // namespace commkit::testing
