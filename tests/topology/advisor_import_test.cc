// Advise() on imported topology files (no probers, no host facts): EFA, P2P, RDMA rails and NVSwitch
// advice derived from the topology model itself, with reasons naming the file; nothing the file does
// not encode (modules, libraries, port states) is claimed.
#include <gtest/gtest.h>

#include <string>

#include "commkit/topology/advisor.h"
#include "commkit/topology/import.h"

namespace commkit::topology {
namespace {

// p4d-like: one socket, one PCIe switch with two A100s and one EFA device (vendor 0x1d0f, 0xefa0),
// a second switch with one more GPU (PHB to the others).
constexpr const char* kEfaXml = R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="ffff:ff:01.0" class="0x060400" vendor="0xffff" device="0xffff" link_speed="8 GT/s" link_width="16">
      <pci busid="0000:10:1c.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="8 GT/s" link_width="16"/>
      <pci busid="0000:10:1d.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="8 GT/s" link_width="16"/>
      <pci busid="0000:10:1b.0" class="0x020000" vendor="0x1d0f" device="0xefa0" link_speed="8 GT/s" link_width="16"/>
    </pci>
    <pci busid="ffff:ff:02.0" class="0x060400" vendor="0xffff" device="0xffff" link_speed="8 GT/s" link_width="16">
      <pci busid="0000:20:1c.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="8 GT/s" link_width="16"/>
    </pci>
  </cpu>
</system>
)";

// Two GPUs and two InfiniBand HCAs (NCCL <net>, which has no port state).
constexpr const char* kIbXml = R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="0000:01:00.0" class="0x060400" vendor="0x1000" device="0xc010" link_speed="16 GT/s" link_width="16">
      <pci busid="0000:02:00.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0000:03:00.0" class="0x020700" vendor="0x15b3" device="0x101b" link_speed="16 GT/s" link_width="16">
        <nic><net name="mlx5_0" dev="0" speed="200000" port="1" guid="0x1" maxconn="131072" gdr="1"/></nic>
      </pci>
    </pci>
    <pci busid="0000:11:00.0" class="0x060400" vendor="0x1000" device="0xc010" link_speed="16 GT/s" link_width="16">
      <pci busid="0000:12:00.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0000:13:00.0" class="0x020700" vendor="0x15b3" device="0x101b" link_speed="16 GT/s" link_width="16">
        <nic><net name="mlx5_1" dev="1" speed="200000" port="1" guid="0x2" maxconn="131072" gdr="1"/></nic>
      </pci>
    </pci>
  </cpu>
</system>
)";

constexpr const char* kP2pCns = "$ nvidia-smi topo -p2p r\n        GPU0    GPU1\n GPU0   X       CNS\n GPU1   CNS     X\n";
constexpr const char* kP2pOk = "$ nvidia-smi topo -p2p r\n        GPU0    GPU1\n GPU0   X       OK\n GPU1   OK      X\n";
constexpr const char* kP2pUnknown = "$ nvidia-smi topo -p2p r\n        GPU0    GPU1\n GPU0   X       U\n GPU1   U       X\n";
constexpr const char* kP2pWriteNs = "$ nvidia-smi topo -p2p w\n        GPU0    GPU1\n GPU0   X       NS\n GPU1   NS      X\n";
constexpr const char* kP2pNvlinkNs = "$ nvidia-smi topo -p2p n\n        GPU0    GPU1\n GPU0   X       NS\n GPU1   NS      X\n";
constexpr const char* kMatrixSys = "        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
                                   "GPU0     X      SYS     0-11            0\n"
                                   "GPU1    SYS      X      12-23           1\n";

ProbeReport Imported(const char* text, const char* origin) {
  auto t = ImportTopologyText(text, origin);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  ProbeReport rep;
  if (t.ok()) rep.topology = std::move(*t);
  return rep;
}

bool AnyFinding(const Advice& a, const std::string& needle) {
  for (const auto& f : a.findings)
    if (f.find(needle) != std::string::npos) return true;
  return false;
}

TEST(AdvisorImport, EfaNicsInAnImportedXmlGiveEfaAdvice) {
  ProbeReport rep = Imported(kEfaXml, "/tmp/p4d.xml");
  ASSERT_EQ(rep.topology.NicCount(), 1u);
  ASSERT_EQ(rep.topology.node(rep.topology.Nics()[0]).nic.kind, NicKind::kEfa);
  ASSERT_FALSE(rep.system.efa_present) << "no live probe";
  Advice a = Advise(rep, {});
  const Recommendation* fi = a.Find("FI_PROVIDER");
  ASSERT_NE(fi, nullptr) << a.ToShell();
  EXPECT_EQ(fi->value, "efa");
  EXPECT_NE(fi->reason.find("the imported topology (nccl-xml /tmp/p4d.xml)"), std::string::npos) << fi->reason;
  EXPECT_NE(fi->reason.find("0000:10:1b.0"), std::string::npos) << fi->reason;
  const Recommendation* rdma = a.Find("FI_EFA_USE_DEVICE_RDMA");
  ASSERT_NE(rdma, nullptr);
  EXPECT_EQ(rdma->value, "1");
  EXPECT_NE(rdma->reason.find("imported topology"), std::string::npos) << rdma->reason;
  EXPECT_TRUE(AnyFinding(a, "aws-ofi-nccl plugin")) << a.ToShell();
  EXPECT_TRUE(AnyFinding(a, "not checked")) << "the file says nothing about installed libraries";
  EXPECT_FALSE(AnyFinding(a, "not found in the usual places")) << a.ToShell();
  EXPECT_FALSE(AnyFinding(a, "uverbs")) << a.ToShell();
  // PIX/PHB paths are not evidence against P2P; nothing about the host's network either.
  EXPECT_EQ(a.Find("NCCL_P2P_DISABLE"), nullptr) << a.ToShell();
  EXPECT_EQ(a.Find("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_TRUE(AnyFinding(a, "NCCL_SOCKET_IFNAME not derived: the imported topology")) << a.ToShell();
  EXPECT_FALSE(AnyFinding(a, "no interface has a usable address")) << "the file has no interfaces, not a host without";
  EXPECT_EQ(a.Find("NCCL_TOPO_FILE"), nullptr);
  EXPECT_NE(a.ToShell().find("export FI_PROVIDER=efa"), std::string::npos);
}

TEST(AdvisorImport, UserProviderContradictingImportedEfaIsAConflict) {
  ProbeReport rep = Imported(kEfaXml, "p4d.xml");
  AdvisorOptions opts;
  opts.env = {{"FI_PROVIDER", "tcp"}};
  Advice a = Advise(rep, opts);
  const Recommendation* fi = a.Find("FI_PROVIDER");
  ASSERT_NE(fi, nullptr);
  EXPECT_TRUE(fi->user_set);
  EXPECT_TRUE(fi->conflict);
}

TEST(AdvisorImport, NoEfaWithoutEfaNics) {
  ProbeReport rep = Imported(kIbXml, "ib.xml");
  Advice a = Advise(rep, {});
  EXPECT_EQ(a.Find("FI_PROVIDER"), nullptr);
  EXPECT_EQ(a.Find("FI_EFA_USE_DEVICE_RDMA"), nullptr);
}

TEST(AdvisorImport, P2pStatusCnsFromNvsmiP2pImportDisablesP2p) {
  ProbeReport rep = Imported(kP2pCns, "/data/p2p.txt");
  ASSERT_EQ(rep.topology.GpuCount(), 2u);
  Advice a = Advise(rep, {});
  const Recommendation* p2p = a.Find("NCCL_P2P_DISABLE");
  ASSERT_NE(p2p, nullptr) << a.ToShell();
  EXPECT_EQ(p2p->value, "1");
  EXPECT_NE(p2p->reason.find("GPU0/GPU1 P2P read status CNS"), std::string::npos) << p2p->reason;
  EXPECT_NE(p2p->reason.find("the imported topology (nvsmi /data/p2p.txt)"), std::string::npos) << p2p->reason;
  AdvisorOptions forced;
  forced.env = {{"NCCL_P2P_DISABLE", "0"}};
  EXPECT_TRUE(Advise(rep, forced).Find("NCCL_P2P_DISABLE")->conflict);
}

TEST(AdvisorImport, P2pWriteStatusCountsNvlinkStatusDoesNot) {
  Advice w = Advise(Imported(kP2pWriteNs, "w.txt"), {});
  ASSERT_NE(w.Find("NCCL_P2P_DISABLE"), nullptr);
  EXPECT_NE(w.Find("NCCL_P2P_DISABLE")->reason.find("P2P write status NS"), std::string::npos);
  // -p2p n says whether there is NVLink, not whether PCIe peer access works.
  EXPECT_EQ(Advise(Imported(kP2pNvlinkNs, "n.txt"), {}).Find("NCCL_P2P_DISABLE"), nullptr);
}

TEST(AdvisorImport, OkOrUnknownP2pAndPathOnlyMatricesDoNotDisableP2p) {
  EXPECT_EQ(Advise(Imported(kP2pOk, "ok.txt"), {}).Find("NCCL_P2P_DISABLE"), nullptr);
  EXPECT_EQ(Advise(Imported(kP2pUnknown, "u.txt"), {}).Find("NCCL_P2P_DISABLE"), nullptr) << "U is unknown, not 'no'";
  // topo -m gives path types only; SYS is no evidence of missing peer access.
  EXPECT_EQ(Advise(Imported(kMatrixSys, "m.txt"), {}).Find("NCCL_P2P_DISABLE"), nullptr);
}

TEST(AdvisorImport, ImportedHcasWithoutPortStateAreNotCalledDown) {
  ProbeReport rep = Imported(kIbXml, "/x/ib.xml");
  ASSERT_EQ(rep.topology.NicCount(), 2u);
  Advice a = Advise(rep, {});
  EXPECT_FALSE(AnyFinding(a, "no RDMA port is ACTIVE")) << a.ToShell();
  EXPECT_FALSE(AnyFinding(a, "nvidia_peermem")) << "loaded modules are not in the file";
  EXPECT_EQ(a.Find("NCCL_IB_HCA"), nullptr);
  const Recommendation* cross = a.Find("NCCL_CROSS_NIC");
  ASSERT_NE(cross, nullptr) << a.ToShell();
  EXPECT_EQ(cross->value, "0");
  EXPECT_NE(cross->reason.find("mlx5_0, mlx5_1"), std::string::npos) << cross->reason;
  EXPECT_NE(cross->reason.find("the imported topology (nccl-xml /x/ib.xml)"), std::string::npos) << cross->reason;
  AdvisorOptions opts;
  opts.env = {{"NCCL_IB_HCA", "mlx5_7"}};
  const Advice user = Advise(rep, opts);
  const Recommendation* hca = user.Find("NCCL_IB_HCA");
  ASSERT_NE(hca, nullptr);
  EXPECT_TRUE(hca->conflict);
  EXPECT_NE(hca->reason.find("matches no HCA in the imported topology"), std::string::npos) << hca->reason;
  opts.env = {{"NCCL_IB_HCA", "mlx5_1"}};
  EXPECT_EQ(Advise(rep, opts).Find("NCCL_IB_HCA"), nullptr) << "matches an HCA of the file";
}

TEST(AdvisorImport, NvSwitchInImportedTopologyIsAFinding) {
  ProbeReport rep;
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  const NodeId c = rep.topology.AddNode(cpu);
  Node sw;
  sw.kind = NodeKind::kNvSwitch;
  sw.parent = c;
  sw.pci.bus_id = "0000:c0:00.0";
  rep.topology.AddNode(sw);
  rep.topology.metadata().source = TopologySource::kHwlocXml;
  rep.topology.metadata().source_path = "dgx.xml";
  Advice a = Advise(rep, {});
  EXPECT_TRUE(AnyFinding(a, "1 NVSwitch(es) in the imported topology (hwloc-xml dgx.xml)")) << a.ToShell();
  EXPECT_EQ(a.Find("NCCL_NVLS_ENABLE"), nullptr) << "whether it is a VM is not in the file";
}

// With probers (a live probe or a replayed capture) host facts count as before: an EFA NIC in the
// model is named as coming from the probed topology, and the plugin/uverbs checks run.
TEST(AdvisorImport, ProbedReportKeepsHostFactChecks) {
  ProbeReport rep = Imported(kEfaXml, "p4d.xml");
  rep.probers.push_back({"pci", ProberState::kOk, ""});
  Advice a = Advise(rep, {});
  ASSERT_NE(a.Find("FI_PROVIDER"), nullptr);
  EXPECT_NE(a.Find("FI_PROVIDER")->reason.find("the probed topology"), std::string::npos);
  EXPECT_TRUE(AnyFinding(a, "not found in the usual places"));
  EXPECT_TRUE(AnyFinding(a, "uverbs"));
}

}  // namespace
}  // namespace commkit::topology
