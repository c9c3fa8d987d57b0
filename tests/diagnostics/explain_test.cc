#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "commkit/diagnostics/explain.h"

namespace commkit::diagnostics {
namespace {

TEST(ExplainTest, EmptyAndUnknownLogsMakeNoClaim) {
  EXPECT_EQ(ExplainLog("").Best(), nullptr);
  Explanation ex = ExplainLog("hello\nworld\nnode1:1:2 [0] NCCL INFO Init COMPLETE\n");
  EXPECT_EQ(ex.Best(), nullptr);
  EXPECT_NE(ex.ToText().find("No confident claim"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(ex.ToJson())["claim"], "no confident claim");
}

TEST(ExplainTest, ShmEnospcIsHighAndSkipsEnvelope) {
  const char* log =
      "RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1\n"
      "ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n"
      "h1:10:11 [1] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-ab to 9637892 bytes, error: No space left on device (28)\n"
      "h1:10:11 [1] NCCL INFO transport/shm.cc:551 -> 2\n";
  Explanation ex = ExplainLog(log);
  ASSERT_NE(ex.Best(), nullptr);
  EXPECT_EQ(ex.Best()->signature, "shm.enospc");
  EXPECT_EQ(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_EQ(ex.Best()->evidence.at(0).line, 3);
  EXPECT_EQ(ex.facts.first_error.line, 3);  // not the envelope on line 1/2
  EXPECT_EQ(ex.facts.nccl_versions, std::vector<std::string>{"2.18.1"});
  EXPECT_EQ(ex.facts.hosts, std::vector<std::string>{"h1"});
}

TEST(ExplainTest, IfnameMismatchHighOnlyWhenEnvShown) {
  std::string base = "n:1:1 [0] bootstrap.cc:37 NCCL WARN Bootstrap : no socket interface found\n";
  EXPECT_EQ(ExplainLog(base).Best()->confidence, Confidence::kMedium);
  Explanation ex = ExplainLog("n:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n" + base);
  EXPECT_EQ(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_NE(ex.Best()->cause.find("NCCL_SOCKET_IFNAME=eth0"), std::string::npos);
}

TEST(ExplainTest, TransportsAndInterfaces) {
  const char* log =
      "a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n"
      "a:1:1 [0] NCCL INFO Using network IB\n"
      "a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n"
      "b:1:2 [3] NCCL INFO Channel 00 : 3[0] -> 4[0] [send] via NET/IB/0\n";
  Explanation ex = ExplainLog(log);
  EXPECT_EQ(ex.facts.transports, (std::vector<std::string>{"IB", "P2P"}));
  EXPECT_EQ(ex.facts.interfaces, std::vector<std::string>{"eth0:10.0.0.1<0>"});
  EXPECT_EQ(ex.facts.hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ex.facts.ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(ex.Best(), nullptr);
}

TEST(ExplainTest, WatchdogNamesOpSeqAndNextSteps) {
  Explanation ex = ExplainLog(
      "[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800100 milliseconds\n");
  ASSERT_NE(ex.Best(), nullptr);
  EXPECT_EQ(ex.Best()->signature, "watchdog.timeout");
  EXPECT_NE(ex.Best()->cause.find("BROADCAST SeqNum=42 timed out after 1800000 ms"), std::string::npos);
  EXPECT_NE(ex.Best()->fix.find("TORCH_NCCL_DUMP_ON_TIMEOUT=1"), std::string::npos);
  EXPECT_NE(ex.Best()->confidence, Confidence::kHigh);
}

TEST(ExplainTest, HostileInputDoesNotCrash) {
  std::string junk(50000, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 131) % 256);
  Explanation ex = ExplainLog(junk);
  (void)ex.ToJson();
  (void)ex.ToText();
}

}  // namespace
}  // namespace commkit::diagnostics
