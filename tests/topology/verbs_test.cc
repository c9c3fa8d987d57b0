// libibverbs facts: code conversion, fact JSON, merge into a probed report, live degradation.
#include "commkit/topology/verbs.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace commkit::topology {
namespace {

using commkit::testing::TempDir;

VerbsReport RoceHca() {
  VerbsReport r;
  r.available = true;
  VerbsDevice d;
  d.name = "mlx5_0";
  d.node_guid = "0c42:a103:0065:8a3c";
  VerbsPort p;
  p.port = 1;
  p.state = 4;
  p.phys_state = 5;
  p.link_layer = 2;
  p.active_speed = 64;  // HDR
  p.active_width = 2;   // 4x
  p.active_mtu = 5;
  p.gids = {{0, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", 1, "enp3s0"},
            {1, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", 2, "enp3s0"},
            {3, "0000:0000:0000:0000:0000:ffff:0a00:0a05", 2, "enp3s0"}};
  d.ports.push_back(p);
  r.devices.push_back(d);
  return r;
}

TEST(Verbs, CodesBecomeSysfsSpellings) {
  EXPECT_EQ(VerbsPortStateName(4), "ACTIVE");
  EXPECT_EQ(VerbsPortStateName(1), "DOWN");
  EXPECT_EQ(VerbsPortStateName(9), "UNKNOWN(9)");
  EXPECT_EQ(VerbsPhysStateName(5), "LinkUp");
  EXPECT_EQ(VerbsPhysStateName(3), "Disabled");
  EXPECT_EQ(VerbsLinkLayerName(0), "InfiniBand");
  EXPECT_EQ(VerbsLinkLayerName(1), "InfiniBand");
  EXPECT_EQ(VerbsLinkLayerName(2), "Ethernet");
  EXPECT_EQ(VerbsGidTypeName(0), "IB/RoCE v1");
  EXPECT_EQ(VerbsGidTypeName(1), "IB/RoCE v1");
  EXPECT_EQ(VerbsGidTypeName(2), "RoCE v2");
  EXPECT_DOUBLE_EQ(VerbsRateGbps(32, 2), 100);   // EDR 4x
  EXPECT_DOUBLE_EQ(VerbsRateGbps(64, 2), 200);   // HDR 4x
  EXPECT_DOUBLE_EQ(VerbsRateGbps(128, 2), 400);  // NDR 4x
  EXPECT_DOUBLE_EQ(VerbsRateGbps(64, 16), 100);  // HDR 2x (HDR100)
  EXPECT_DOUBLE_EQ(VerbsRateGbps(3, 2), 0);
  EXPECT_DOUBLE_EQ(VerbsRateGbps(32, 3), 0);
  EXPECT_EQ(VerbsMtuBytes(5), 4096);
  EXPECT_EQ(VerbsMtuBytes(1), 256);
  EXPECT_EQ(VerbsMtuBytes(0), 0);
  NicPort p = ToNicPort(RoceHca().devices[0].ports[0]);
  EXPECT_EQ(p.state, "ACTIVE");
  EXPECT_EQ(p.phys_state, "LinkUp");
  EXPECT_EQ(p.link_layer, "Ethernet");
  EXPECT_DOUBLE_EQ(p.speed_gbps, 200);
  EXPECT_EQ(p.mtu, 4096);
  EXPECT_EQ(p.gids.size(), 3u);
}

TEST(Verbs, FactRoundTripsAndRejectsGarbage) {
  const VerbsReport r = RoceHca();
  auto back = ParseVerbsFact(VerbsReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->available);
  ASSERT_EQ(back->devices.size(), 1u);
  EXPECT_EQ(back->devices[0].node_guid, r.devices[0].node_guid);
  ASSERT_EQ(back->devices[0].ports.size(), 1u);
  EXPECT_EQ(back->devices[0].ports[0].gids[2].type, 2);
  EXPECT_EQ(back->devices[0].ports[0].gids[2].ndev, "enp3s0");
  EXPECT_EQ(VerbsReportToJson(*back), VerbsReportToJson(r));
  EXPECT_FALSE(ParseVerbsFact("not json").ok());
  EXPECT_FALSE(ParseVerbsFact("[1,2]").ok());
  EXPECT_FALSE(ParseVerbsFact(R"({"available":true,"devices":[{"ports":[]}]})").ok());  // no name
  EXPECT_FALSE(ParseVerbsFact(R"({"available":true,"devices":[{"name":"x","ports":[{"port":"one"}]}]})").ok());
}

TEST(Verbs, MergeFillsOnlyWhatSysfsLacks) {
  ProbeReport rep;
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  const NodeId c = rep.topology.AddNode(cpu);
  Node nic;
  nic.kind = NodeKind::kNic;
  nic.parent = c;
  nic.label = "mlx5_0";
  nic.nic.name = "mlx5_0";
  nic.nic.kind = NicKind::kRoCE;
  NicPort sysfs_port;
  sysfs_port.port = 1;
  sysfs_port.state = "DOWN";  // sysfs said DOWN: verbs must not overwrite it
  sysfs_port.speed_gbps = 100;
  nic.nic.ports.push_back(sysfs_port);
  rep.topology.AddNode(nic);
  // sysfs knew GID 0 but not its type (old kernels have no gid_attrs).
  rep.gids.push_back({"mlx5_0", 1, 0, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "", ""});

  const int added = MergeVerbsReport(RoceHca(), rep);
  EXPECT_GT(added, 0);
  const NicInfo& n = rep.topology.node(*rep.topology.FindNic("mlx5_0")).nic;
  ASSERT_EQ(n.ports.size(), 1u);
  EXPECT_EQ(n.ports[0].state, "DOWN");
  EXPECT_DOUBLE_EQ(n.ports[0].speed_gbps, 100);
  EXPECT_EQ(n.ports[0].link_layer, "Ethernet");  // filled
  EXPECT_EQ(n.ports[0].mtu, 4096);               // filled
  EXPECT_EQ(n.guid, "0c42:a103:0065:8a3c");
  ASSERT_EQ(rep.gids.size(), 3u);
  EXPECT_EQ(rep.gids[0].type, "IB/RoCE v1");
  EXPECT_EQ(rep.gids[0].ndev, "enp3s0");
  EXPECT_EQ(rep.gids[2].type, "RoCE v2");
  EXPECT_TRUE(rep.gids[2].ipv4_mapped());
  EXPECT_EQ(MergeVerbsReport(RoceHca(), rep), 0) << "merging twice adds nothing";
}

TEST(Verbs, ReplayedFactAddsDeviceSysfsDidNotList) {
  TempDir dir;
  dir.Write("sys/devices/system/node/node0/cpulist", "0-7\n");
  dir.Write(".commkit/facts/verbs", VerbsReportToJson(RoceHca()));
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_NE(rep->Prober("verbs"), nullptr);
  EXPECT_EQ(rep->Prober("verbs")->state, ProberState::kOk) << rep->Prober("verbs")->detail;
  auto id = rep->topology.FindNic("mlx5_0");
  ASSERT_TRUE(id.has_value());
  const Node& n = rep->topology.node(*id);
  EXPECT_EQ(n.nic.kind, NicKind::kRoCE);
  EXPECT_EQ(rep->topology.node(n.parent).kind, NodeKind::kCpu);
  EXPECT_EQ(rep->gids.size(), 3u);
}

TEST(Verbs, AbsentFactOrLibrarySkipsWithReason) {
  TempDir dir;
  dir.Write("sys/devices/system/node/node0/cpulist", "0-7\n");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));  // capture without the fact
  ASSERT_TRUE(rep.ok());
  ASSERT_NE(rep->Prober("verbs"), nullptr);
  EXPECT_EQ(rep->Prober("verbs")->state, ProberState::kSkipped);

  dir.Write(".commkit/facts/verbs", R"j({"available":false,"error":"no RDMA kernel support (ib_uverbs not loaded)","devices":[]})j");
  rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Prober("verbs")->state, ProberState::kSkipped);
  EXPECT_NE(rep->Prober("verbs")->detail.find("ib_uverbs"), std::string::npos);

  dir.Write(".commkit/facts/verbs", "{garbage");
  rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << "a corrupt fact must not fail the whole probe";
  EXPECT_EQ(rep->Prober("verbs")->state, ProberState::kFailed);
}

TEST(Verbs, LiveFactDegradesCleanly) {
  // This machine has no RDMA device: the fact must parse, and either be unavailable with a reason
  // or list whatever devices exist (never crash).
  auto r = ParseVerbsFact(VerbsFact());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (!r->available) {
    EXPECT_FALSE(r->error.empty());
  }
  for (const auto& d : r->devices) EXPECT_FALSE(d.name.empty());
}

}  // namespace
}  // namespace commkit::topology
