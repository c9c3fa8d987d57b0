// Vendor presets on the vendors' own topology files (COMMKIT_FIXTURES_DIR/topology; skips when absent).
#include <gtest/gtest.h>

#include "commkit/topology/advisor.h"
#include "commkit/topology/import.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

std::optional<ProbeReport> Imported(const std::string& name) {
  if (!testing::FixturesDir()) return std::nullopt;
  const auto path = *testing::FixturesDir() / "topology" / name;
  if (!std::filesystem::exists(path)) return std::nullopt;
  auto t = ImportTopologyFile(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return std::nullopt;
  ProbeReport rep;
  rep.topology = std::move(*t);
  return rep;
}

std::string Findings(const Advice& a) {
  std::string out;
  for (const auto& f : a.findings) out += f + "\n";
  return out;
}

TEST(AdvisorPlatformCorpus, AzureNdv4FileIsRecognisedFromItsDevices) {
  auto rep = Imported("azhpc-images_ndv4-topo.xml");
  if (!rep) GTEST_SKIP() << "fixture absent";
  Advice a = Advise(*rep, {});
  EXPECT_NE(Findings(a).find("recognised Azure ND A100 v4"), std::string::npos) << Findings(a);
  const Recommendation* topo = a.Find("NCCL_TOPO_FILE");
  ASSERT_NE(topo, nullptr) << a.ToShell();
  EXPECT_EQ(topo->value, "/opt/microsoft/ndv4/topo.xml");
  EXPECT_NE(topo->reason.find("https://github.com/Azure/azhpc-images/blob/master/customizations/ndv4.sh"), std::string::npos);
  ASSERT_NE(a.Find("NCCL_IB_PCI_RELAXED_ORDERING"), nullptr);
}

TEST(AdvisorPlatformCorpus, AwsP4dFileIsRecognisedFromItsEfaNics) {
  auto rep = Imported("aws-ofi-nccl_p4d-24xl-topo.xml");
  if (!rep) GTEST_SKIP() << "fixture absent";
  Advice a = Advise(*rep, {});
  EXPECT_NE(Findings(a).find("recognised AWS p4d.24xlarge / p4de.24xlarge"), std::string::npos) << Findings(a);
  const Recommendation* fi = a.Find("FI_PROVIDER");
  ASSERT_NE(fi, nullptr);
  EXPECT_NE(fi->reason.find("4 EFA NIC(s) in the imported topology"), std::string::npos) << fi->reason;
  EXPECT_NE(fi->reason.find("efa-cheatsheet.md"), std::string::npos) << fi->reason;
  ASSERT_NE(a.Find("FI_EFA_USE_HUGE_PAGE"), nullptr);
}

TEST(AdvisorPlatformCorpus, ABareMetalDumpIsNotACloudMachine) {
  auto rep = Imported("nccl-dump_8xRTX3090-pcie-only_topo.xml");
  if (!rep) GTEST_SKIP() << "fixture absent";
  EXPECT_EQ(Findings(Advise(*rep, {})).find("recognised"), std::string::npos);
}

}  // namespace
}  // namespace commkit::topology
