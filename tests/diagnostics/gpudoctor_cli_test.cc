#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using commkit::testing::BinDir;
using commkit::testing::RunCommand;
using commkit::testing::TestDataDir;

std::string Doctor() { return (BinDir() / "gpudoctor").string(); }
std::string Data(const std::string& m) { return (TestDataDir() / "gpudoctor" / m).string(); }

TEST(GpudoctorCliTest, ExitCodes) {
  EXPECT_EQ(RunCommand(Doctor() + " --from " + Data("host-xid79") + " --only kernel.xid").exit_code, 2);
  EXPECT_EQ(RunCommand(Doctor() + " --from " + Data("host-two-nccl") + " --only nccl.*").exit_code, 1);
  EXPECT_EQ(RunCommand(Doctor() + " --from " + Data("host-two-nccl") + " --only gpu").exit_code, 0);
  EXPECT_EQ(RunCommand(Doctor() + " --bogus-flag").exit_code, 3);
  EXPECT_EQ(RunCommand(Doctor() + " --from /nonexistent/snap").exit_code, 3);
  EXPECT_EQ(RunCommand(Doctor() + " --help").exit_code, 0);
  EXPECT_EQ(RunCommand(Doctor() + " --only no.such.check 2>/dev/null").exit_code, 3);
  EXPECT_EQ(RunCommand(Doctor() + " --from " + Data("host-xid79") + " --only kernel").exit_code, 2);
}

// On a machine without a GPU driver or EFA (this project's CI), the NVML and EFA checks skip and say why.
TEST(GpudoctorCliTest, GpuAndEfaChecksSkipCleanlyWithoutHardware) {
  std::error_code ec;
  const bool gpus = std::filesystem::exists("/proc/driver/nvidia/gpus", ec) && !std::filesystem::is_empty("/proc/driver/nvidia/gpus", ec);
  if (gpus || std::filesystem::exists("/sys/module/efa", ec))
    GTEST_SKIP() << "this machine has an NVIDIA GPU or EFA: the checks would run for real";
  auto r = RunCommand(Doctor() + " --json --only gpu.nvlink,gpu.ecc,gpu.clocks,net.efa 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto doc = nlohmann::json::parse(r.output);
  ASSERT_EQ(doc["checks"].size(), 4u) << r.output;
  for (auto& c : doc["checks"]) {
    EXPECT_EQ(c["result"], "skip") << c.dump();
    const std::string summary = c["summary"];
    EXPECT_TRUE(summary.find("no NVIDIA driver: ") == 0 || summary.find("no EFA device") == 0) << summary;
  }
}

TEST(GpudoctorCliTest, BenchRunsLocallyAndRefusesReplay) {
  EXPECT_EQ(RunCommand(Doctor() + " --bench --from " + Data("host-xid79") + " 2>/dev/null").exit_code, 3);
  auto r = RunCommand(Doctor() + " --bench --json --only shm.size 2>&1");
  ASSERT_TRUE(nlohmann::json::accept(r.output)) << r.output;
  auto doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(r.exit_code, doc["exit_code"].get<int>());
  ASSERT_TRUE(doc.contains("bench")) << r.output;
  ASSERT_FALSE(doc["bench"]["rows"].empty()) << r.output;
  EXPECT_EQ(doc["bench"]["rows"][0]["backend"], "host");
  for (auto& row : doc["bench"]["rows"]) {
    EXPECT_TRUE(row["correct"].get<bool>()) << row.dump();
    EXPECT_GT(row["pred_busbw_gbps"].get<double>(), 0) << row.dump();
  }
}

TEST(GpudoctorCliTest, JsonListAndNoColor) {
  auto r = RunCommand(Doctor() + " --json --from " + Data("container-shm64mb-8gpu") + " --skip 'kernel,net*' 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  auto doc = nlohmann::json::parse(r.output);
  bool saw = false;
  for (auto& c : doc["checks"]) {
    EXPECT_NE(c["category"], "kernel");
    if (c["id"] == "shm.size") saw = (c["result"] == "fail");
  }
  EXPECT_TRUE(saw);
  auto list = RunCommand(Doctor() + " --list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.output.find("shm.size\tnode"), std::string::npos);
  auto text = RunCommand(Doctor() + " --from " + Data("host-xid79") + " | cat");
  EXPECT_EQ(text.output.find("\033["), std::string::npos);
}

TEST(GpudoctorCliTest, SnapshotAndReplayByteIdentical) {
  commkit::testing::TempDir dir;
  std::string snap = (dir.path() / "s.tar.gz").string();
  ASSERT_EQ(RunCommand(Doctor() + " snapshot -o " + snap + " 2>/dev/null").exit_code, 0);
  auto a = RunCommand(Doctor() + " --json --from " + snap);
  auto b = RunCommand(Doctor() + " --json --from " + snap);
  EXPECT_EQ(a.output, b.output);
  EXPECT_TRUE(nlohmann::json::accept(a.output));
}

TEST(GpudoctorCliTest, ExplainFileAndStdin) {
  commkit::testing::TempDir dir;
  auto log = dir.Write("x.log", "h:1:2 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-x to 9637892 bytes, error: No space left on device (28)\n");
  auto r = RunCommand(Doctor() + " explain " + log.string());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("Root cause (high confidence)"), std::string::npos) << r.output;
  auto j = RunCommand("cat " + log.string() + " | " + Doctor() + " explain --json -");
  EXPECT_EQ(nlohmann::json::parse(j.output)["claim"], "shm.space");
  EXPECT_EQ(RunCommand(Doctor() + " explain /nonexistent.log 2>/dev/null").exit_code, 3);
}

}  // namespace
