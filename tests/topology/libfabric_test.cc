// libfabric facts: JSON, merge of EFA domains, replay, live degradation (no EFA here).
#include "commkit/topology/libfabric.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace commkit::topology {
namespace {

using commkit::testing::TempDir;

FabricReport P4dEfa() {
  FabricReport r;
  r.available = true;
  r.version = "1.22";
  for (int i = 0; i < 2; ++i) {
    const std::string dev = "rdmap" + std::to_string(16 + i) + "s27";
    const std::string bdf = "0000:" + std::to_string(10 + i) + ":1b.0";
    r.domains.push_back({"efa", "efa", dev + "-rdm", "rdm", bdf});
    r.domains.push_back({"efa", "efa", dev + "-dgrm", "dgram", bdf});
  }
  return r;
}

TEST(Libfabric, FactRoundTripsAndRejectsGarbage) {
  auto back = ParseLibfabricFact(FabricReportToJson(P4dEfa()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(FabricReportToJson(*back), FabricReportToJson(P4dEfa()));
  EXPECT_FALSE(ParseLibfabricFact("").ok());
  EXPECT_FALSE(ParseLibfabricFact("42").ok());
  EXPECT_FALSE(ParseLibfabricFact(R"({"available":true,"domains":[{"fabric":"efa"}]})").ok());  // no domain
}

TEST(Libfabric, DeviceNameStripsEndpointSuffix) {
  EXPECT_EQ(FabricDeviceName({"efa", "efa", "rdmap16s27-rdm", "rdm", ""}), "rdmap16s27");
  EXPECT_EQ(FabricDeviceName({"efa", "efa", "rdmap16s27-dgrm", "dgram", ""}), "rdmap16s27");
  EXPECT_EQ(FabricDeviceName({"efa", "efa", "efa_0", "rdm", ""}), "efa_0");
}

TEST(Libfabric, MergeAddsEfaNicsOnceAndKeepsSysfsOnes) {
  ProbeReport rep;
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  const NodeId c = rep.topology.AddNode(cpu);
  Node known;  // sysfs saw the first device (by bus id, under another name)
  known.kind = NodeKind::kNic;
  known.parent = c;
  known.label = "efa_0";
  known.nic.name = "efa_0";
  known.nic.kind = NicKind::kEfa;
  known.pci.bus_id = "0000:10:1b.0";
  rep.topology.AddNode(known);
  EXPECT_EQ(MergeFabricReport(P4dEfa(), rep), 1);
  EXPECT_TRUE(rep.system.efa_present);
  auto added = rep.topology.FindNic("rdmap17s27");
  ASSERT_TRUE(added.has_value());
  EXPECT_EQ(rep.topology.node(*added).nic.kind, NicKind::kEfa);
  EXPECT_EQ(rep.topology.node(*added).pci.bus_id, "0000:11:1b.0");
  EXPECT_EQ(rep.topology.node(*added).parent, c);
  EXPECT_EQ(rep.topology.Nics().size(), 2u);
  EXPECT_EQ(MergeFabricReport(P4dEfa(), rep), 0);

  FabricReport none;
  none.error = "fi_getinfo(efa): No data available";
  ProbeReport empty;
  EXPECT_EQ(MergeFabricReport(none, empty), 0);
  EXPECT_FALSE(empty.system.efa_present);
}

TEST(Libfabric, ReplayedFactsReachTheReport) {
  TempDir dir;
  dir.Write("sys/devices/system/node/node0/cpulist", "0-7\n");
  dir.Write(".commkit/facts/libfabric", FabricReportToJson(P4dEfa()));
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_NE(rep->Prober("libfabric"), nullptr);
  EXPECT_EQ(rep->Prober("libfabric")->state, ProberState::kOk) << rep->Prober("libfabric")->detail;
  EXPECT_TRUE(rep->system.efa_present);
  EXPECT_EQ(rep->topology.Nics().size(), 2u);

  FabricReport none;
  none.error = "fi_getinfo(efa): No data available";
  dir.Write(".commkit/facts/libfabric", FabricReportToJson(none));
  rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Prober("libfabric")->state, ProberState::kSkipped);
  EXPECT_NE(rep->Prober("libfabric")->detail.find("No data available"), std::string::npos);
  EXPECT_FALSE(rep->system.efa_present);
  for (const auto& w : rep->warnings) EXPECT_EQ(w.find("libfabric"), std::string::npos) << "no EFA is not a warning";

  dir.Write(".commkit/facts/libfabric", "{");
  rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Prober("libfabric")->state, ProberState::kFailed);
}

TEST(Libfabric, LiveQueryReportsAbsenceWithReason) {
  auto r = ParseLibfabricFact(LibfabricFact("efa"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (!r->available) {
    EXPECT_FALSE(r->error.empty());
    EXPECT_TRUE(r->domains.empty());
  }
  EXPECT_EQ(r->provider, "efa");
}

}  // namespace
}  // namespace commkit::topology
