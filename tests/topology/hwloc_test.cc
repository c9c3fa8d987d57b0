// hwloc prober: bitmap helpers, locality from hwloc XML, the merge into a probed sysfs tree (replay
// with recorded "hwloc"/"hwloc.xml" facts), degradation on bad facts, the live probe on this
// machine, and capture -> replay equality.
#include "commkit/topology/hwloc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "commkit/common/config.h"
#include "commkit/common/strings.h"
#include "commkit/topology/advisor.h"
#include "commkit/topology/json.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;

// A two-socket VM-like machine as hwloc 2.x exports it: Package 1 holds host bridge 0000:[80-8f]
// with GPU 81:00.0, an InfiniBand NIC 82:00.0 (netdev ib0, RDMA mlx5_0) and GPU 83:00.0; GPU
// 03:00.0 is (wrongly, per sysfs) under Package 1 too; ENA 00:05.0 hangs off the Machine (both
// NUMA nodes: hwloc cannot place it either).
constexpr const char* kTwoSocketXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000ffff" complete_cpuset="0x0000ffff" nodeset="0x00000003" complete_nodeset="0x00000003" gp_index="1">
    <info name="Backend" value="Linux"/>
    <info name="hwlocVersion" value="2.9.0"/>
    <object type="Package" os_index="0" cpuset="0x000000ff" nodeset="0x00000001" gp_index="2">
      <info name="CPUVendor" value="GenuineIntel"/>
      <object type="NUMANode" os_index="0" cpuset="0x000000ff" nodeset="0x00000001" gp_index="3" local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x000000ff" nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x000000ff" nodeset="0x00000001" gp_index="5"/>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000ff00" nodeset="0x00000002" gp_index="6">
      <object type="NUMANode" os_index="1" cpuset="0x0000ff00" nodeset="0x00000002" gp_index="7" local_memory="2147483648"/>
      <object type="Core" os_index="8" cpuset="0x0000ff00" nodeset="0x00000002" gp_index="8">
        <object type="PU" os_index="8" cpuset="0x0000ff00" nodeset="0x00000002" gp_index="9"/>
      </object>
      <object type="Bridge" gp_index="10" bridge_type="0-1" depth="0" bridge_pci="0000:[80-8f]">
        <object type="PCIDev" gp_index="11" pci_busid="0000:81:00.0" pci_type="0302 [10de:20b5] [10de:1533] a1" pci_link_speed="31.507692">
          <object type="OSDev" gp_index="12" name="cuda0" osdev_type="5" subtype="CUDA">
            <info name="GPUModel" value="NVIDIA A100 80GB PCIe"/>
          </object>
        </object>
        <object type="PCIDev" gp_index="13" pci_busid="0000:82:00.0" pci_type="0207 [15b3:101b] [15b3:0007] 00" pci_link_speed="31.507692">
          <object type="OSDev" gp_index="14" name="ib0" osdev_type="2"/>
          <object type="OSDev" gp_index="15" name="mlx5_0" osdev_type="3"/>
        </object>
        <object type="PCIDev" gp_index="16" pci_busid="0000:83:00.0" pci_type="0302 [10de:20b5] [10de:1533] a1" pci_link_speed="31.507692"/>
      </object>
      <object type="Bridge" gp_index="17" bridge_type="0-1" depth="0" bridge_pci="0000:[03-03]">
        <object type="PCIDev" gp_index="18" pci_busid="0000:03:00.0" pci_type="0302 [10de:20b5] [10de:1533] a1" pci_link_speed="31.507692"/>
      </object>
    </object>
    <object type="Bridge" gp_index="19" bridge_type="0-1" depth="0" bridge_pci="0000:[00-00]">
      <object type="PCIDev" gp_index="20" pci_busid="0000:00:05.0" pci_type="0200 [1d0f:ec20] [1d0f:ec20] 00" pci_link_speed="0.000000">
        <object type="OSDev" gp_index="21" name="ens5" osdev_type="2"/>
      </object>
    </object>
  </object>
</topology>
)";

// Minimal sysfs tree: NUMA nodes and PCI functions sitting directly on their root bus.
class Tree {
 public:
  explicit Tree(const TempDir& dir) : dir_(dir) {
    dir_.Write("proc/cpuinfo", "vendor_id\t: GenuineIntel\nflags\t\t: fpu hypervisor\n");
    fs::create_directories(dir_.path() / "sys/bus/pci/devices");
  }
  void Numa(int n, const std::string& cpus, const std::string& meminfo = "") {
    const std::string d = "sys/devices/system/node/node" + std::to_string(n);
    dir_.Write(d + "/cpulist", cpus + "\n");
    if (!meminfo.empty()) dir_.Write(d + "/meminfo", meminfo);
  }
  void Pci(const std::string& root, const std::string& bdf, const std::string& cls, const std::string& vendor, int numa) {
    const std::string rel = "sys/devices/" + root + "/" + bdf;
    dir_.Write(rel + "/class", cls + "\n");
    dir_.Write(rel + "/vendor", vendor + "\n");
    dir_.Write(rel + "/device", "0x1234\n");
    dir_.Write(rel + "/numa_node", std::to_string(numa) + "\n");
    if (numa >= 0) dir_.Write(rel + "/local_cpulist", numa == 0 ? "0-7\n" : "8-15\n");
    fs::create_symlink("../../../devices/" + root + "/" + bdf, dir_.path() / "sys/bus/pci/devices" / bdf);
  }
  void Fact(const std::string& name, const std::string& text) { dir_.Write(".commkit/facts/" + name, text); }

 private:
  const TempDir& dir_;
};

void MakeTwoSocketVm(const TempDir& dir) {
  Tree t(dir);
  t.Numa(0, "0-7", "Node 0 MemTotal:        1048576 kB\nNode 0 MemFree:          524288 kB\n");
  t.Numa(1, "8-15");  // no meminfo: memory comes from hwloc
  t.Pci("pci0000:00", "0000:03:00.0", "0x030200", "0x10de", 0);
  t.Pci("pci0000:00", "0000:00:05.0", "0x020000", "0x1d0f", -1);
  t.Pci("pci0000:80", "0000:81:00.0", "0x030200", "0x10de", -1);
  t.Pci("pci0000:80", "0000:82:00.0", "0x020700", "0x15b3", -1);
  t.Fact("nvml", R"({"available":false,"error":"libnvidia-ml.so.1 not found"})");
  t.Fact("hwloc", R"({"available":true,"version":"2.9.0","error":""})");
  t.Fact("hwloc.xml", kTwoSocketXml);
}

ProbeOptions ReplayOptions() {
  ProbeOptions o;
  o.network = o.rdma = o.cuda = o.verbs = o.libfabric = false;
  return o;
}

bool HasNote(const Topology& t, std::string_view text) {
  return std::any_of(t.metadata().notes.begin(), t.metadata().notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

TEST(Hwloc, BitmapHelpers) {
  EXPECT_EQ(HwlocBitmapIndexes("0x00000003"), (std::vector<int>{0, 1}));
  EXPECT_EQ(HwlocBitmapIndexes("0x00000001,0x80000000"), (std::vector<int>{31, 32}));
  EXPECT_EQ(HwlocBitmapIndexes("0x0"), std::vector<int>{});
  EXPECT_EQ(HwlocBitmapIndexes("0xf...f,0x00000000", 36), (std::vector<int>{32, 33, 34, 35}));
  EXPECT_TRUE(HwlocBitmapIndexes("0xzz").empty());
  EXPECT_TRUE(HwlocBitmapIndexes("0x123456789").empty()) << "hwloc words are 32 bits";
  EXPECT_EQ(IndexesToList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(IndexesToList({}), "");
}

TEST(Hwloc, LocalityFromXml) {
  auto loc = ReadHwlocLocality(kTwoSocketXml);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->version, "2.9.0");
  EXPECT_EQ(loc->packages, 2);
  ASSERT_EQ(loc->numa.size(), 2u);
  EXPECT_EQ(loc->numa[1].os_index, 1);
  EXPECT_EQ(loc->numa[1].package, 1);
  EXPECT_EQ(loc->numa[1].cpulist, "8-15");
  EXPECT_EQ(loc->numa[1].memory_bytes, 2147483648u);
  ASSERT_EQ(loc->pci.size(), 5u);
  EXPECT_EQ(loc->pci[0].bus_id, "0000:81:00.0");
  EXPECT_EQ(loc->pci[0].numa, std::vector<int>{1});
  EXPECT_EQ(loc->pci[4].bus_id, "0000:00:05.0");
  EXPECT_EQ(loc->pci[4].numa, (std::vector<int>{0, 1})) << "attached to the Machine";
  auto bad = ReadHwlocLocality("<topology><object type=\"Machine\">", "x.xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.xml:1"), std::string::npos) << bad.status().ToString();
}

// hwloc 1.x layout: NUMANode above Socket, I/O below the NUMANode; node 1 has no nodeset attributes.
TEST(Hwloc, LocalityFromV1Xml) {
  constexpr const char* kV1 = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0" cpuset="0x0000000f" nodeset="0x00000003">
    <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001" local_memory="1000">
      <object type="Socket" os_index="0" cpuset="0x00000003" nodeset="0x00000001"/>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[00-04]">
        <object type="PCIDev" pci_busid="0000:02:00.0" pci_type="0200 [8086:1521] [8086:0001] 01"/>
      </object>
    </object>
    <object type="NUMANode" os_index="1" cpuset="0x0000000c" local_memory="2000">
      <object type="Socket" os_index="1" cpuset="0x0000000c"/>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[80-84]">
        <object type="PCIDev" pci_busid="0000:81:00.0" pci_type="0302 [10de:1db4] [10de:1214] a1"/>
      </object>
    </object>
  </object>
</topology>
)";
  auto loc = ReadHwlocLocality(kV1);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->packages, 2);
  ASSERT_EQ(loc->numa.size(), 2u);
  EXPECT_EQ(loc->numa[0].package, 0);
  EXPECT_EQ(loc->numa[1].package, 1);
  EXPECT_EQ(loc->numa[1].cpulist, "2-3");
  EXPECT_EQ(loc->numa[1].memory_bytes, 2000u);
  ASSERT_EQ(loc->pci.size(), 2u);
  EXPECT_EQ(loc->pci[0].numa, std::vector<int>{0});
  EXPECT_EQ(loc->pci[1].numa, std::vector<int>{1}) << "no nodeset: the NUMANode above decides";
  EXPECT_EQ(loc->pci[1].cpulist, "2-3");
}

TEST(Hwloc, ReplayFillsNumaWhereSysfsSaysMinusOne) {
  TempDir dir;
  MakeTwoSocketVm(dir);
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  const Topology& t = rep->topology;
  ASSERT_NE(rep->Prober("hwloc"), nullptr);
  EXPECT_EQ(rep->Prober("hwloc")->state, ProberState::kOk) << rep->Prober("hwloc")->detail;
  EXPECT_EQ(rep->system.hwloc_version, "2.9.0");
  EXPECT_EQ(rep->system.packages, 2);
  for (const auto& w : rep->warnings) EXPECT_EQ(w.find("inconsistent"), std::string::npos) << w;

  // NUMA nodes: sysfs cpu lists, memory from sysfs (node0) and hwloc (node1), packages from hwloc.
  ASSERT_EQ(rep->numa.size(), 2u);
  EXPECT_EQ(rep->Numa(0)->memory_bytes, 1073741824u);
  EXPECT_EQ(rep->Numa(0)->source, "sysfs+hwloc");
  EXPECT_EQ(rep->Numa(1)->memory_bytes, 2147483648u);
  EXPECT_EQ(rep->Numa(1)->package, 1);
  EXPECT_EQ(t.node(*t.FindCpuByNuma(1)).cpu.affinity_mask, "0000ff00");

  // GPU and NIC whose sysfs numa_node is -1: placed on NUMA node 1 by hwloc, tree moved there.
  const DeviceLocality* gpu = rep->LocalityOf("0000:81:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->numa_id, 1);
  EXPECT_EQ(gpu->cpulist, "8-15");
  EXPECT_EQ(gpu->source, "hwloc");
  const DeviceLocality* nic = rep->LocalityOf("0000:82:00.0");
  ASSERT_NE(nic, nullptr);
  EXPECT_EQ(nic->numa_id, 1);
  EXPECT_EQ(nic->source, "hwloc");
  const NodeId gpu_id = *t.FindByBusId("0000:81:00.0");
  const NodeId nic_id = *t.FindByBusId("0000:82:00.0");
  EXPECT_EQ(t.CpuOf(gpu_id), *t.FindCpuByNuma(1));
  EXPECT_EQ(t.CpuOf(nic_id), *t.FindCpuByNuma(1));
  EXPECT_TRUE(HasNote(t, "NUMA node 1 of 0000:81:00.0 from hwloc"));
  // hwloc's OS devices name the NIC.
  EXPECT_EQ(t.node(nic_id).nic.name, "mlx5_0");
  EXPECT_EQ(t.node(nic_id).nic.netdevs, std::vector<std::string>{"ib0"});
  EXPECT_EQ(rep->LocalityOf("0000:82:00.0")->label, "mlx5_0");

  // sysfs knew GPU 03:00.0 is on NUMA 0: kept, the disagreement noted.
  EXPECT_EQ(rep->LocalityOf("0000:03:00.0")->numa_id, 0);
  EXPECT_EQ(rep->LocalityOf("0000:03:00.0")->source, "sysfs");
  EXPECT_EQ(rep->LocalityOf("0000:03:00.0")->cpulist, "0-7");
  EXPECT_EQ(t.CpuOf(*t.FindByBusId("0000:03:00.0")), *t.FindCpuByNuma(0));
  EXPECT_TRUE(HasNote(t, "keeping sysfs"));
  // Attached to the whole machine: still unknown.
  EXPECT_EQ(rep->LocalityOf("0000:00:05.0")->numa_id, -1);
  EXPECT_EQ(rep->LocalityOf("0000:00:05.0")->source, "");
  EXPECT_EQ(t.node(*t.FindByBusId("0000:00:05.0")).nic.netdevs, std::vector<std::string>{"ens5"});

  // GPU 83:00.0 only hwloc saw: added once, under the same (sysfs) host bridge as GPU 81:00.0.
  EXPECT_EQ(t.GpuCount(), 3u);
  EXPECT_EQ(t.NicCount(), 2u);
  const NodeId extra = *t.FindByBusId("0000:83:00.0");
  EXPECT_EQ(t.node(extra).parent, t.node(gpu_id).parent);
  EXPECT_EQ(t.NodesOfKind(NodeKind::kHostBridge).size(), 2u) << "no duplicated host bridge";
  EXPECT_EQ(rep->LocalityOf("0000:83:00.0")->numa_id, 1);
  EXPECT_EQ(rep->locality.size(), 5u);
  EXPECT_TRUE(t.Validate().ok());

  // Path classes follow the fixed tree: same host bridge = PHB, across sockets = SYS.
  auto phb = ClassifyPath(t, gpu_id, nic_id);
  ASSERT_TRUE(phb.ok()) << phb.status().ToString();
  EXPECT_EQ(phb->type, PathType::kPhb);
  auto sys = ClassifyPath(t, *t.FindByBusId("0000:03:00.0"), nic_id);
  ASSERT_TRUE(sys.ok());
  EXPECT_EQ(sys->type, PathType::kSys);
}

TEST(Hwloc, TopoFileAdviceSaysWhenHwlocPlacedEveryDevice) {
  TempDir dir;
  MakeTwoSocketVm(dir);
  {
    auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
    ASSERT_TRUE(rep.ok());
    const Advice advice = Advise(*rep, {});
    EXPECT_EQ(advice.Find("NCCL_TOPO_FILE"), nullptr) << "no placeholder path";
    EXPECT_NE(Join(advice.findings, "\n").find("bare-metal twin"), std::string::npos) << "ens5 is still unplaced";
  }
  // The same machine where hwloc can place ens5 too (Machine nodeset = node 0).
  std::string xml = kTwoSocketXml;
  const std::string from = "nodeset=\"0x00000003\" complete_nodeset";
  ASSERT_NE(xml.find(from), std::string::npos);
  xml.replace(xml.find(from), from.size(), "nodeset=\"0x00000001\" complete_nodeset");
  Tree(dir).Fact("hwloc.xml", xml);
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->LocalityOf("0000:00:05.0")->numa_id, 0);
  const Advice advice = Advise(*rep, {});
  EXPECT_EQ(advice.Find("NCCL_TOPO_FILE"), nullptr) << "no placeholder path";
  EXPECT_NE(Join(advice.findings, "\n").find("on this host (hwloc placed"), std::string::npos) << Join(advice.findings, "\n");
}

TEST(Hwloc, WithoutHwlocFactsNumaStaysUnknown) {
  TempDir dir;
  MakeTwoSocketVm(dir);
  ProbeOptions o = ReplayOptions();
  o.hwloc = false;
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), o);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Prober("hwloc"), nullptr);
  EXPECT_EQ(rep->LocalityOf("0000:81:00.0")->numa_id, -1);
  EXPECT_EQ(rep->Numa(1)->memory_bytes, 0u);
  EXPECT_EQ(rep->topology.GpuCount(), 2u);
}

TEST(Hwloc, BadFactsDegradeToWarnings) {
  {
    TempDir dir;
    MakeTwoSocketVm(dir);
    Tree(dir).Fact("hwloc.xml", "<topology version=\"2.0\"><object type=\"Machine\"");
    auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->Prober("hwloc")->state, ProberState::kFailed);
    EXPECT_NE(rep->Prober("hwloc")->detail.find("not well-formed"), std::string::npos) << rep->Prober("hwloc")->detail;
    EXPECT_TRUE(std::any_of(rep->warnings.begin(), rep->warnings.end(), [](const std::string& w) { return w.rfind("hwloc:", 0) == 0; }));
    EXPECT_EQ(rep->topology.GpuCount(), 2u) << "sysfs results survive";
  }
  {
    TempDir dir;
    MakeTwoSocketVm(dir);
    Tree(dir).Fact("hwloc", R"({"available":false,"version":"2.9.0","error":"hwloc_topology_load: Permission denied"})");
    auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->Prober("hwloc")->state, ProberState::kFailed);
    EXPECT_NE(rep->Prober("hwloc")->detail.find("Permission denied"), std::string::npos);
  }
  {
    TempDir dir;
    MakeTwoSocketVm(dir);
    Tree(dir).Fact("hwloc", R"j({"available":false,"error":"commkit was built without hwloc (install libhwloc-dev and reconfigure)"})j");
    auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->Prober("hwloc")->state, ProberState::kSkipped);
    EXPECT_TRUE(std::none_of(rep->warnings.begin(), rep->warnings.end(), [](const std::string& w) { return w.rfind("hwloc", 0) == 0; }))
        << "a build without hwloc is not a problem of the machine";
  }
  {
    TempDir dir;
    MakeTwoSocketVm(dir);
    Tree(dir).Fact("hwloc", "{not json");
    auto rep = ProbeTopology(*SystemView::Replay(dir.path()), ReplayOptions());
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->Prober("hwloc")->state, ProberState::kFailed);
  }
}

TEST(Hwloc, LiveProbeReportsNumaAndNics) {
  auto rep = ProbeTopology(*SystemView::Live());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  const ProberStatus* hw = rep->Prober("hwloc");
  ASSERT_NE(hw, nullptr);
  if (!COMMKIT_HAVE_HWLOC) {
    EXPECT_EQ(hw->state, ProberState::kSkipped);
    GTEST_SKIP() << "built without hwloc";
  }
  ASSERT_EQ(hw->state, ProberState::kOk) << hw->detail;
  EXPECT_FALSE(rep->system.hwloc_version.empty());
  EXPECT_GE(rep->system.packages, 1);
  ASSERT_FALSE(rep->numa.empty());
  for (const auto& n : rep->numa) {
    EXPECT_GE(n.os_index, 0);
    EXPECT_FALSE(n.cpulist.empty()) << "NUMA node " << n.os_index;
    EXPECT_NE(n.source.find("hwloc"), std::string::npos);
    EXPECT_NE(rep->topology.FindCpuByNuma(n.os_index), std::nullopt);
  }
  EXPECT_TRUE(std::any_of(rep->numa.begin(), rep->numa.end(), [](const NumaNodeInfo& n) { return n.memory_bytes > 0; }));
  // Every NIC has a locality entry; with one NUMA node every device is on it.
  for (NodeId id : rep->topology.Nics()) {
    const Node& n = rep->topology.node(id);
    if (n.pci.bus_id.empty()) continue;
    const DeviceLocality* l = rep->LocalityOf(n.pci.bus_id);
    ASSERT_NE(l, nullptr) << n.label;
    if (rep->numa.size() == 1) {
      EXPECT_EQ(l->numa_id, rep->numa[0].os_index) << n.label;
      EXPECT_FALSE(l->source.empty());
    }
  }
  EXPECT_TRUE(rep->topology.Validate().ok());
}

TEST(Hwloc, CaptureReplaysToTheSameJson) {
  TempDir cap;
  auto live = SystemView::Live();
  ASSERT_TRUE(live->StartCapture(cap.path() / "c").ok());
  auto a = ProbeTopology(*live);
  live->StopCapture();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  if (COMMKIT_HAVE_HWLOC) {
    EXPECT_TRUE(fs::exists(cap.path() / "c/.commkit/facts/hwloc"));
    EXPECT_TRUE(fs::exists(cap.path() / "c/.commkit/facts/hwloc.xml"));
  }
  auto b = ProbeTopology(*SystemView::Replay(cap.path() / "c"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  a->topology.metadata().source_path.clear();
  b->topology.metadata().source_path.clear();
  EXPECT_EQ(ExportJson(a->topology), ExportJson(b->topology));
  ASSERT_EQ(a->numa.size(), b->numa.size());
  for (std::size_t i = 0; i < a->numa.size(); ++i) {
    EXPECT_EQ(a->numa[i].cpulist, b->numa[i].cpulist);
    EXPECT_EQ(a->numa[i].memory_bytes, b->numa[i].memory_bytes);
    EXPECT_EQ(a->numa[i].source, b->numa[i].source);
  }
  ASSERT_EQ(a->locality.size(), b->locality.size());
  for (std::size_t i = 0; i < a->locality.size(); ++i) {
    EXPECT_EQ(a->locality[i].bus_id, b->locality[i].bus_id);
    EXPECT_EQ(a->locality[i].numa_id, b->locality[i].numa_id);
    EXPECT_EQ(a->locality[i].source, b->locality[i].source);
  }
  EXPECT_EQ(a->system.hwloc_version, b->system.hwloc_version);
  EXPECT_EQ(a->system.packages, b->system.packages);
  ASSERT_EQ(a->probers.size(), b->probers.size());
  for (std::size_t i = 0; i < a->probers.size(); ++i) {
    EXPECT_EQ(a->probers[i].name, b->probers[i].name);
    EXPECT_EQ(a->probers[i].state, b->probers[i].state) << a->probers[i].name;
  }
}

}  // namespace
}  // namespace commkit::topology
