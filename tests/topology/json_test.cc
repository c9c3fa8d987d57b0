// Topology JSON: round trip of every field, and clean errors for bad documents.
#include <gtest/gtest.h>

#include "commkit/topology/json.h"
#include "commkit/topology/path.h"

namespace commkit::topology {
namespace {

TEST(JsonTest, RoundTripsAllFields) {
  Topology t;
  t.metadata().source = TopologySource::kProbed;
  t.metadata().hostname = "node1";
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  cpu.cpu.numa_id = 0;
  cpu.cpu.arch = "x86_64";
  cpu.cpu.affinity_list = "0-15";
  const NodeId c = t.AddNode(cpu);
  Node gpu;
  gpu.kind = NodeKind::kGpu;
  gpu.parent = c;
  gpu.pci.bus_id = "0000:17:00.0";
  gpu.pci.link = {4, 16, 5, 16};
  gpu.gpu.index = 0;
  gpu.gpu.sm = 90;
  gpu.gpu.uuid = "GPU-1234";
  gpu.gpu.memory_bytes = 85899345920ULL;
  gpu.gpu.gdr = true;
  const NodeId g = t.AddNode(gpu);
  Node nic;
  nic.kind = NodeKind::kNic;
  nic.parent = c;
  nic.pci.bus_id = "0000:18:00.0";
  nic.nic.kind = NicKind::kRoCE;
  nic.nic.name = "mlx5_0";
  nic.nic.netdevs = {"ens1f0"};
  NicPort port;
  port.state = "ACTIVE";
  port.link_layer = "Ethernet";
  port.speed_gbps = 200;
  port.gids = {"fe80::1", "::ffff:10.0.0.1"};
  nic.nic.ports.push_back(port);
  const NodeId n = t.AddNode(nic);
  t.AddPathOverride({g, n, "PXB"});
  Node gpu2 = gpu;
  gpu2.pci.bus_id = "0000:19:00.0";
  gpu2.gpu.index = 1;
  const NodeId g2 = t.AddNode(gpu2);
  t.AddP2pOverride({g, g2, 'r', "CNS"});
  t.AddGpuAffinity({g, "0-15", "0", "N/A"});
  t.AddLink({LinkKind::kNvLink, g, g2, 18, 4, 0, ""});

  const std::string text = ExportJson(t);
  auto back = LoadJson(text, "t.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ExportJson(*back), text);
  EXPECT_EQ(back->metadata().hostname, "node1");
  EXPECT_EQ(back->node(n).nic.ports.at(0).gids.size(), 2u);
  EXPECT_EQ(back->node(n).nic.kind, NicKind::kRoCE);
  EXPECT_EQ(back->node(g).gpu.memory_bytes, 85899345920ULL);
  EXPECT_TRUE(back->node(g).pci.link.Degraded());
  EXPECT_EQ(ClassifyPath(*back, g, g2)->Label(), "NV18");
  EXPECT_NEAR(ClassifyPath(*back, g, g2)->bandwidth_gbps, 450.0, 1e-9);
  EXPECT_FALSE(ClassifyPath(*back, g, g2)->p2p);
  EXPECT_EQ(ClassifyPath(*back, g, n)->Label(), "PXB");
}

TEST(JsonTest, BadDocumentsGiveCleanErrors) {
  EXPECT_EQ(LoadJson("{\n\"schema\": ", "x.json").status().code(), StatusCode::kDataLoss);
  EXPECT_NE(LoadJson("{\n\"schema\": ", "x.json").status().message().find("x.json:2"), std::string::npos);
  EXPECT_EQ(LoadJson(R"({"schema":"other","version":1})").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(LoadJson(R"({"schema":"commkit.topology","version":2,"nodes":[]})").status().code(),
            StatusCode::kNotSupported);
  EXPECT_FALSE(LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[{"kind":"toaster"}]})").ok());
  EXPECT_FALSE(LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[{"kind":"gpu","parent":"x"}]})").ok());
  EXPECT_FALSE(LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[],"links":[{"kind":"nvlink","a":0,"b":1}]})").ok());
  EXPECT_FALSE(LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[{"kind":"gpu","parent":5}]})").ok());
  auto empty = LoadJson(R"({"schema":"commkit.topology","version":1,"nodes":[]})");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->nodes().size(), 0u);
}

}  // namespace
}  // namespace commkit::topology
