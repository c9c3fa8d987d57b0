// ApplyAdvice: sets only what the user has not set, logs or applies per mode, never overwrites.
#include <gtest/gtest.h>

#include <map>

#include "commkit/topology/advisor.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvAccess Access() {
    EnvAccess e;
    e.get = [this](const std::string& k) -> std::optional<std::string> {
      auto it = vars.find(k);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
    e.set = [this](const std::string& k, const std::string& v) { vars.emplace(k, v); };
    return e;
  }
};

Advice G5Like() {
  Advice a;
  Recommendation p2p;
  p2p.variable = "NCCL_P2P_DISABLE";
  p2p.value = "1";
  p2p.reason = "GPU pairs without peer access ('peer access is not supported')";
  a.settings.push_back(p2p);
  Recommendation ifname;
  ifname.variable = "NCCL_SOCKET_IFNAME";
  ifname.value = "=ens5";
  ifname.reason = "ens5 routes to MASTER_ADDR";
  a.settings.push_back(ifname);
  Recommendation user;
  user.variable = "NCCL_IB_HCA";
  user.value = "mlx5_0";
  user.reason = "the RDMA NIC";
  user.user_set = true;
  user.user_value = "mlx5_1";
  user.conflict = true;
  a.settings.push_back(user);
  Recommendation empty;  // no value, not set: nothing to say
  empty.variable = "NCCL_TOPO_FILE";
  a.settings.push_back(empty);
  return a;
}

TEST(ApplyAdvice, ApplySetsUnsetVariablesOnlyAndSaysWhy) {
  FakeEnv env;
  env.vars["NCCL_SOCKET_IFNAME"] = "eth1";  // set after the advice's snapshot: still the user's
  auto lines = ApplyAdvice(G5Like(), AdviceMode::kApply, env.Access());
  EXPECT_EQ(env.vars["NCCL_P2P_DISABLE"], "1");
  EXPECT_EQ(env.vars["NCCL_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env.vars.count("NCCL_IB_HCA"), 0u) << "a user-set variable in the snapshot is never written";
  EXPECT_EQ(env.vars.count("NCCL_TOPO_FILE"), 0u);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "NCCL_P2P_DISABLE=1 (set: GPU pairs without peer access ('peer access is not supported'))");
  EXPECT_EQ(lines[1], "NCCL_SOCKET_IFNAME=eth1 (kept yours; advice was =ens5: ens5 routes to MASTER_ADDR)");
  EXPECT_EQ(lines[2], "NCCL_IB_HCA=mlx5_1 (kept yours; it contradicts this machine: the RDMA NIC)");
}

TEST(ApplyAdvice, LogModeChangesNothing) {
  FakeEnv env;
  auto lines = ApplyAdvice(G5Like(), AdviceMode::kLog, env.Access());
  EXPECT_TRUE(env.vars.empty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("would set with COMMKIT_NCCL_ADVICE=apply"), std::string::npos) << lines[0];
}

TEST(ApplyAdvice, OffDoesNothing) {
  FakeEnv env;
  EXPECT_TRUE(ApplyAdvice(G5Like(), AdviceMode::kOff, env.Access()).empty());
  EXPECT_TRUE(env.vars.empty());
}

TEST(ApplyAdvice, ProcessEnvironmentNeverOverwrites) {
  testing::ScopedEnv keep("NCCL_P2P_DISABLE", "0");
  testing::ScopedEnv unset("NCCL_SOCKET_IFNAME", std::nullopt);
  Advice a = G5Like();
  a.settings.resize(2);
  ApplyAdvice(a, AdviceMode::kApply);
  EXPECT_STREQ(std::getenv("NCCL_P2P_DISABLE"), "0");
  ASSERT_NE(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "=ens5");
}

}  // namespace
}  // namespace commkit::topology
