// Advise() on real imported topology files (COMMKIT_FIXTURES_DIR/topology; skips when absent): the
// advice comes from what each file encodes, and the reasons name the file.
#include <gtest/gtest.h>

#include "commkit/topology/advisor.h"
#include "commkit/topology/import.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

std::optional<ProbeReport> Imported(const std::string& name) {
  const auto path = *testing::FixturesDir() / "topology" / name;
  if (!std::filesystem::exists(path)) return std::nullopt;
  auto t = ImportTopologyFile(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return std::nullopt;
  ProbeReport rep;
  rep.topology = std::move(*t);
  return rep;
}

bool AnyFinding(const Advice& a, const std::string& needle) {
  for (const auto& f : a.findings)
    if (f.find(needle) != std::string::npos) return true;
  return false;
}

// aws-ofi-nccl's p4d.24xlarge NCCL_TOPO_FILE: 8 A100 and 4 EFA (0x1d0f:0xefa0) behind 4 switches.
TEST(AdvisorCorpusTest, P4dTopologyFileGetsEfaAdvice) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  for (const char* name : {"aws-ofi-nccl_p4d-24xl-topo.xml", "aws-ofi-nccl_p4de-24xl-topo.xml"}) {
    SCOPED_TRACE(name);
    auto rep = Imported(name);
    if (!rep) GTEST_SKIP() << name << " absent";
    Advice a = Advise(*rep, {});
    const Recommendation* fi = a.Find("FI_PROVIDER");
    ASSERT_NE(fi, nullptr) << a.ToShell();
    EXPECT_EQ(fi->value, "efa");
    EXPECT_NE(fi->reason.find("4 EFA NIC(s) in the imported topology (nccl-xml "), std::string::npos) << fi->reason;
    EXPECT_NE(fi->reason.find(name), std::string::npos) << fi->reason;
    ASSERT_NE(a.Find("FI_EFA_USE_DEVICE_RDMA"), nullptr);
    EXPECT_EQ(a.Find("FI_EFA_USE_DEVICE_RDMA")->value, "1");
    EXPECT_TRUE(AnyFinding(a, "aws-ofi-nccl plugin")) << a.ToShell();
    // The file has PIX/PHB/SYS paths but no P2P capability: no P2P verdict; no host facts claimed.
    EXPECT_EQ(a.Find("NCCL_P2P_DISABLE"), nullptr) << a.ToShell();
    EXPECT_EQ(a.Find("NCCL_IB_HCA"), nullptr) << "EFA is not an IB HCA";
    EXPECT_FALSE(AnyFinding(a, "not found in the usual places"));
    EXPECT_FALSE(AnyFinding(a, "nvidia_peermem"));
  }
}

// The g5.48xlarge file is a CPU/PCI skeleton: its NIC is a bare <pci busid> without class or vendor,
// so nothing in it says EFA, and no EFA advice is invented.
TEST(AdvisorCorpusTest, G5SkeletonEncodesNoEfa) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto rep = Imported("aws-ofi-nccl_g5.48xl-topo.xml");
  if (!rep) GTEST_SKIP() << "absent";
  EXPECT_EQ(Advise(*rep, {}).Find("FI_PROVIDER"), nullptr);
}

TEST(AdvisorCorpusTest, NvsmiP2pStatusDecidesP2p) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  if (auto cns = Imported("nvidia-smi-topo-p2p-r_2xL4-CNS_mlengineering.txt")) {
    Advice a = Advise(*cns, {});
    const Recommendation* p2p = a.Find("NCCL_P2P_DISABLE");
    ASSERT_NE(p2p, nullptr) << a.ToShell();
    EXPECT_EQ(p2p->value, "1");
    EXPECT_NE(p2p->reason.find("GPU0/GPU1 P2P read status CNS in the imported topology (nvsmi "), std::string::npos)
        << p2p->reason;
  }
  if (auto ok = Imported("nvidia-smi-topo-p2p-r_8gpu-OK_mlengineering.txt")) {
    EXPECT_EQ(Advise(*ok, {}).Find("NCCL_P2P_DISABLE"), nullptr);
  }
  if (auto phb = Imported("nvidia-smi-topo-m_2gpu-pcie-PHB_mlengineering.txt")) {
    EXPECT_EQ(Advise(*phb, {}).Find("NCCL_P2P_DISABLE"), nullptr) << "a PHB path is not a P2P verdict";
  }
}

// ND A100 v4: 8 HDR HCAs in the file without port states: 8 rails, none called down.
TEST(AdvisorCorpusTest, Ndv4RailsWithoutInventedPortStates) {
  if (!testing::FixturesDir()) GTEST_SKIP() << "COMMKIT_FIXTURES_DIR not set";
  auto rep = Imported("azhpc-images_ndv4-topo.xml");
  if (!rep) GTEST_SKIP() << "absent";
  Advice a = Advise(*rep, {});
  EXPECT_FALSE(AnyFinding(a, "no RDMA port is ACTIVE")) << a.ToShell();
  ASSERT_NE(a.Find("NCCL_CROSS_NIC"), nullptr) << a.ToShell();
  EXPECT_NE(a.Find("NCCL_CROSS_NIC")->reason.find("8 IB/RoCE HCAs"), std::string::npos) << a.Find("NCCL_CROSS_NIC")->reason;
  EXPECT_EQ(a.Find("FI_PROVIDER"), nullptr);
}

}  // namespace
}  // namespace commkit::topology
