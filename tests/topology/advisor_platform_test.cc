// Vendor settings for recognised cloud machines: recognised from DMI (live probes, captures) or from
// the devices alone, every setting with the vendor's published source.
#include <gtest/gtest.h>

#include "commkit/topology/advisor.h"

namespace commkit::topology {
namespace {

bool AnyFinding(const Advice& a, const std::string& needle) {
  for (const auto& f : a.findings)
    if (f.find(needle) != std::string::npos) return true;
  return false;
}

ProbeReport Host(const std::string& vendor, const std::string& product) {
  ProbeReport rep;
  rep.probers.push_back({"pci", ProberState::kOk, ""});  // a probed host, not an imported file
  rep.system.dmi_sys_vendor = vendor;
  rep.system.dmi_product_name = product;
  return rep;
}

void AddGpus(ProbeReport& rep, const std::string& name, int n) {
  for (int i = 0; i < n; ++i) {
    Node g;
    g.kind = NodeKind::kGpu;
    g.gpu.index = i;
    g.gpu.name = name;
    g.label = "GPU" + std::to_string(i);
    rep.topology.AddNode(g);
  }
}

TEST(AdvisorPlatform, AwsInstanceTypeFromDmiGetsTheEfaPresetWithSources) {
  ProbeReport rep = Host("Amazon EC2", "p5.48xlarge");
  AddGpus(rep, "NVIDIA H100 80GB HBM3", 8);
  Advice a = Advise(rep, {});
  EXPECT_TRUE(AnyFinding(a, "recognised AWS p5.48xlarge (DMI product_name 'p5.48xlarge')")) << a.ToShell();
  for (const char* var : {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_USE_HUGE_PAGE"}) {
    const Recommendation* r = a.Find(var);
    ASSERT_NE(r, nullptr) << var << "\n" << a.ToShell();
    EXPECT_NE(r->reason.find("source: https://github.com/aws-samples/awsome-distributed-training"), std::string::npos) << r->reason;
  }
  EXPECT_EQ(a.Find("FI_EFA_USE_HUGE_PAGE")->value, "0");
  EXPECT_TRUE(AnyFinding(a, "leave NCCL_TOPO_FILE unset")) << a.ToShell();
  EXPECT_EQ(a.Find("NCCL_TOPO_FILE"), nullptr);
  // A user's contrary value stays theirs.
  AdvisorOptions mine;
  mine.env["FI_EFA_USE_HUGE_PAGE"] = "1";
  EXPECT_TRUE(Advise(rep, mine).Find("FI_EFA_USE_HUGE_PAGE")->user_set);
}

TEST(AdvisorPlatform, AzureSizeFromGpuModelAndHcas) {
  ProbeReport rep = Host("Microsoft Corporation", "Virtual Machine");
  AddGpus(rep, "NVIDIA H100 80GB HBM3", 8);
  for (int i = 0; i < 8; ++i) {
    Node n;
    n.kind = NodeKind::kNic;
    n.nic.kind = NicKind::kInfiniBand;
    n.nic.name = "mlx5_ib" + std::to_string(i);
    rep.topology.AddNode(n);
  }
  rep.system.hypervisor = true;
  rep.system.pci_tree_flat = true;
  Advice a = Advise(rep, {});
  const Recommendation* topo = a.Find("NCCL_TOPO_FILE");
  ASSERT_NE(topo, nullptr) << a.ToShell();
  EXPECT_EQ(topo->value, "/opt/microsoft/ndv5/topo.xml");
  EXPECT_NE(topo->reason.find("customizations/ndv5.sh"), std::string::npos) << topo->reason;
  ASSERT_NE(a.Find("NCCL_IB_PCI_RELAXED_ORDERING"), nullptr);
  EXPECT_EQ(a.Find("NCCL_IB_PCI_RELAXED_ORDERING")->value, "1");
  EXPECT_EQ(a.Find("NCCL_IGNORE_CPU_AFFINITY")->value, "1");
  EXPECT_FALSE(AnyFinding(a, "then NCCL_TOPO_FILE=FILE")) << "the vendor's file replaces the generic advice";
}

TEST(AdvisorPlatform, GcpA3HighUsesTheProbedControlAndDataNics) {
  ProbeReport rep = Host("Google", "Google Compute Engine");
  AddGpus(rep, "NVIDIA H100 80GB HBM3", 8);
  for (int i = 0; i < 5; ++i) {
    Node n;
    n.kind = NodeKind::kNic;
    n.nic.kind = NicKind::kEthernet;
    n.pci.vendor_id = "0x1ae0";
    n.nic.netdevs = {"enp" + std::to_string(i) + "s0"};
    n.nic.name = n.nic.netdevs[0];
    rep.topology.AddNode(n);
  }
  Route def;
  def.ifname = "enp0s0";
  def.destination = "0.0.0.0";
  rep.network.routes.push_back(def);
  Advice a = Advise(rep, {});
  EXPECT_TRUE(AnyFinding(a, "recognised GCP A3 High (a3-highgpu-8g)")) << a.ToShell();
  ASSERT_NE(a.Find("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"), nullptr) << a.ToShell();
  EXPECT_EQ(a.Find("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME")->value, "enp1s0,enp2s0,enp3s0,enp4s0");
  EXPECT_EQ(a.Find("NCCL_GPUDIRECTTCPX_CTRL_DEV")->value, "enp0s0");
  EXPECT_NE(a.Find("NCCL_GPUDIRECTTCPX_CTRL_DEV")->reason.find("gpu-bandwidth-gpudirect-tcpx"), std::string::npos);
  EXPECT_TRUE(AnyFinding(a, "receive-datapath manager")) << a.ToShell();
}

TEST(AdvisorPlatform, AnUnknownMachineGetsNoPreset) {
  ProbeReport rep = Host("Dell Inc.", "PowerEdge XE9680");
  AddGpus(rep, "NVIDIA H100 80GB HBM3", 8);
  Advice a = Advise(rep, {});
  EXPECT_FALSE(AnyFinding(a, "recognised")) << a.ToShell();
  EXPECT_EQ(a.Find("NCCL_IB_PCI_RELAXED_ORDERING"), nullptr);
}

TEST(AdvisorPlatform, ShellOutputQuotesValuesAndKeepsCommentsOnOneLine) {
  ProbeReport rep = Host("", "");
  NetInterface evil;
  evil.name = "eth0;touch /tmp/owned\nexport X=1";
  evil.up = true;
  rep.network.interfaces.push_back(evil);
  Route def;
  def.ifname = evil.name;
  rep.network.routes.push_back(def);
  const std::string sh = Advise(rep, {}).ToShell();
  EXPECT_EQ(sh.find("\nexport X=1"), std::string::npos) << sh;
  EXPECT_NE(sh.find("export NCCL_SOCKET_IFNAME='eth0;touch /tmp/owned\\x0aexport X=1'"), std::string::npos) << sh;
}

}  // namespace
}  // namespace commkit::topology
