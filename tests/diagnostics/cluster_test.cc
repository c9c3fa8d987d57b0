// gpudoctor cluster mode in one process: ranks are threads sharing a HashStore, probing over loopback.
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "commkit/comm/hash_store.h"
#include "commkit/diagnostics/cluster.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

using namespace std::chrono_literals;

ClusterOptions Options(int rank, int world) {
  ClusterOptions o;
  o.rank = rank;
  o.world = world;
  o.timeout = 10s;
  o.connect_timeout = 2s;
  o.bandwidth_bytes = 1 << 20;
  o.listen_address = "127.0.0.1";
  o.selection.only = {"shm"};  // keep the node part small
  return o;
}

TEST(Cluster, ThreeRanksOverLoopbackConnectEveryPair) {
  HashStore store;
  CheckRegistry registry = CheckRegistry::BuiltIn();
  CheckContext context{SystemView::Live()};
  std::vector<Result<std::optional<ClusterReport>>> results(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { results[r] = RunCluster(store, registry, context, Options(r, 3)); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
  EXPECT_FALSE(results[1]->has_value());
  EXPECT_FALSE(results[2]->has_value());
  ASSERT_TRUE(results[0]->has_value());
  const ClusterReport& rep = **results[0];
  ASSERT_EQ(rep.hosts.size(), 3u);
  ASSERT_EQ(rep.links.size(), 6u);
  for (const ClusterLink& l : rep.links) {
    EXPECT_TRUE(l.ok) << l.from << "->" << l.to << ": " << l.error;
    EXPECT_GT(l.mbytes_per_s, 0) << l.from << "->" << l.to;
  }
  EXPECT_TRUE(rep.diff.empty());  // same process: same facts
  auto json = nlohmann::json::parse(rep.ToJson());
  EXPECT_EQ(json["schema"], "commkit.gpudoctor.cluster/1");
  EXPECT_EQ(json["links"].size(), 6u);
  EXPECT_NE(rep.ToText(false).find("TCP connectivity"), std::string::npos);
}

TEST(Cluster, MissingRankIsNamedNotWaitedOnForever) {
  HashStore store;
  CheckRegistry registry = CheckRegistry::BuiltIn();
  CheckContext context{SystemView::Live()};
  ClusterOptions o0 = Options(0, 3), o1 = Options(1, 3);
  o0.timeout = o1.timeout = 1s;
  Result<std::optional<ClusterReport>> r1 = Status::Internal("not run");
  std::thread t([&] { r1 = RunCluster(store, registry, context, o1); });
  auto start = std::chrono::steady_clock::now();
  auto r0 = RunCluster(store, registry, context, o0);
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // bounded (two 1 s waits plus probes)
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r0->has_value());
  const ClusterReport& rep = **r0;
  EXPECT_FALSE(rep.hosts[2].arrived);
  EXPECT_EQ(rep.ExitCode(), 2);
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_NE(rep.findings.front().summary.find("ranks [2] of 3 never reported"), std::string::npos)
      << rep.findings.front().summary;
  for (const ClusterLink& l : rep.links) EXPECT_NE(l.to, 2);
}

TEST(Cluster, RefusedPeerAndMtuMismatchAndSlowHostAreNamed) {
  std::vector<ClusterHost> hosts(4);
  for (int r = 0; r < 4; ++r) {
    hosts[r].rank = r;
    hosts[r].arrived = true;
    hosts[r].host = "n" + std::to_string(r);
    hosts[r].iface = "eth0";
    hosts[r].listen = "10.0.0." + std::to_string(r) + ":1";
    hosts[r].facts = {{"net.nccl_iface", "eth0"}, {"net.nccl_iface.mtu", r == 2 ? "9000" : "1500"}};
  }
  std::vector<ClusterLink> links;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      if (b == 3) links.push_back({a, b, false, "refused (x) connecting to 10.0.0.3:1", 0});
      else links.push_back({a, b, true, "", (a == 1 || b == 1) ? 100.0 : 1000.0});
    }
  ClusterReport rep = BuildClusterReport(hosts, links);
  EXPECT_EQ(rep.ExitCode(), 2);
  bool refused = false, mtu = false, slow = false;
  for (const ClusterFinding& f : rep.findings) {
    if (f.ranks == std::vector<int>{3} && f.summary.find("refused") != std::string::npos) refused = true;
    if (f.ranks == std::vector<int>{2} && f.fix.find("mtu 1500") != std::string::npos) mtu = true;
    if (f.ranks == std::vector<int>{1} && f.summary.find("slow host") != std::string::npos) slow = true;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(mtu);
  EXPECT_TRUE(slow);
  EXPECT_EQ(rep.diff.count("net.nccl_iface.mtu"), 1u);
}

}  // namespace
}  // namespace commkit::diagnostics
