// ImportHwlocXml on hwloc 1.x XML (no version attribute, "Socket" objects below their NUMANode, I/O
// attached to the NUMANode, numeric osdev_type): devices, tree and paths, not only locality.
#include <gtest/gtest.h>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

namespace commkit::topology {
namespace {

// Two NUMA nodes, one socket each. Node 0: host bridge -> root port -> PCIe switch (upstream port at
// depth 2, downstream ports at depth 3) with two Tesla V100 (cuda0/cuda1 OS devices) and an Intel NIC
// (eth0). Node 1: host bridge -> root port -> a ConnectX-5 InfiniBand HCA (mlx5_0 + ib0).
constexpr const char* kV1 = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" online_cpuset="0x0000000f" allowed_cpuset="0x0000000f" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003">
    <info name="OSName" value="Linux"/>
    <info name="hwlocVersion" value="1.11.2"/>
    <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" allowed_nodeset="0x00000001" local_memory="67430400000">
      <object type="Socket" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" allowed_nodeset="0x00000001">
        <info name="CPUVendor" value="GenuineIntel"/>
        <info name="CPUFamilyNumber" value="6"/>
        <info name="CPUModelNumber" value="79"/>
        <object type="Core" os_index="0" cpuset="0x00000001"><object type="PU" os_index="0" cpuset="0x00000001"/></object>
        <object type="Core" os_index="1" cpuset="0x00000002"><object type="PU" os_index="1" cpuset="0x00000002"/></object>
      </object>
      <object type="Bridge" os_index="0" bridge_type="0-1" depth="0" bridge_pci="0000:[00-08]">
        <object type="Bridge" os_index="16" bridge_type="1-1" depth="1" bridge_pci="0000:[02-06]" pci_busid="0000:00:02.0" pci_type="0604 [8086:6f04] [0000:0000] 01" pci_link_speed="15.753846">
          <object type="Bridge" os_index="4096" bridge_type="1-1" depth="2" bridge_pci="0000:[03-06]" pci_busid="0000:02:00.0" pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846">
            <object type="Bridge" os_index="12416" bridge_type="1-1" depth="3" bridge_pci="0000:[04-04]" pci_busid="0000:03:08.0" pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846">
              <object type="PCIDev" os_index="16384" name="NVIDIA Corporation GV100GL [Tesla V100 PCIe 16GB]" pci_busid="0000:04:00.0" pci_type="0302 [10de:1db4] [10de:1214] a1" pci_link_speed="15.753846">
                <object type="OSDev" name="card1" osdev_type="1"/>
                <object type="OSDev" name="cuda0" osdev_type="5">
                  <info name="CoProcType" value="CUDA"/>
                  <info name="GPUModel" value="Tesla V100-PCIE-16GB"/>
                </object>
              </object>
            </object>
            <object type="Bridge" os_index="12432" bridge_type="1-1" depth="3" bridge_pci="0000:[05-05]" pci_busid="0000:03:10.0" pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846">
              <object type="PCIDev" os_index="20480" name="NVIDIA Corporation GV100GL [Tesla V100 PCIe 16GB]" pci_busid="0000:05:00.0" pci_type="0302 [10de:1db4] [10de:1214] a1" pci_link_speed="15.753846">
                <object type="OSDev" name="cuda1" osdev_type="5">
                  <info name="CoProcType" value="CUDA"/>
                  <info name="GPUModel" value="Tesla V100-PCIE-16GB"/>
                </object>
              </object>
            </object>
            <object type="Bridge" os_index="12448" bridge_type="1-1" depth="3" bridge_pci="0000:[06-06]" pci_busid="0000:03:11.0" pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846">
              <object type="PCIDev" os_index="24576" name="Intel Corporation I350 Gigabit Network Connection" pci_busid="0000:06:00.0" pci_type="0200 [8086:1521] [15d9:1521] 01" pci_link_speed="0.500000">
                <object type="OSDev" name="eth0" osdev_type="2">
                  <info name="Address" value="0c:c4:7a:00:00:01"/>
                </object>
              </object>
            </object>
          </object>
        </object>
      </object>
    </object>
    <object type="NUMANode" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" online_cpuset="0x0000000c" allowed_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" allowed_nodeset="0x00000002" local_memory="67567890432">
      <object type="Socket" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" online_cpuset="0x0000000c" allowed_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" allowed_nodeset="0x00000002">
        <info name="CPUVendor" value="GenuineIntel"/>
        <object type="Core" os_index="0" cpuset="0x00000004"><object type="PU" os_index="2" cpuset="0x00000004"/></object>
        <object type="Core" os_index="1" cpuset="0x00000008"><object type="PU" os_index="3" cpuset="0x00000008"/></object>
      </object>
      <object type="Bridge" os_index="1" bridge_type="0-1" depth="0" bridge_pci="0000:[80-88]">
        <object type="Bridge" os_index="524304" bridge_type="1-1" depth="1" bridge_pci="0000:[81-81]" pci_busid="0000:80:02.0" pci_type="0604 [8086:6f04] [0000:0000] 01" pci_link_speed="15.753846">
          <object type="PCIDev" os_index="528384" name="Mellanox Technologies MT27800 Family [ConnectX-5]" pci_busid="0000:81:00.0" pci_type="0207 [15b3:1017] [15b3:0007] 00" pci_link_speed="15.753846">
            <object type="OSDev" name="ib0" osdev_type="2">
              <info name="Address" value="20:00:10:29:fe:80:00:00:00:00:00:00:24:8a:07:03:00:b3:fc:a8"/>
            </object>
            <object type="OSDev" name="mlx5_0" osdev_type="3">
              <info name="NodeGUID" value="248a:0703:00b3:fca8"/>
            </object>
          </object>
        </object>
      </object>
    </object>
  </object>
  <distances nbobjs="2" relative_depth="1" latency_base="10.000000">
    <latency value="1.000000"/>
    <latency value="2.100000"/>
    <latency value="2.100000"/>
    <latency value="1.000000"/>
  </distances>
</topology>
)";

TEST(HwlocV1Import, DevicesTreeAndPaths) {
  ASSERT_EQ(DetectTopologyFormat(kV1), TopologyFormat::kHwlocXml);
  auto t = ImportHwlocXml(kV1, "v1.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->metadata().source, TopologySource::kHwlocXml);
  EXPECT_EQ(t->metadata().format_version, "1");

  // One CPU per NUMA node / socket: the v1 Socket below its NUMANode is the same CPU, not a second one.
  ASSERT_EQ(t->Cpus().size(), 2u);
  const Node& cpu0 = t->node(t->Cpus()[0]);
  const Node& cpu1 = t->node(t->Cpus()[1]);
  EXPECT_EQ(cpu0.cpu.numa_id, 0);
  EXPECT_EQ(cpu1.cpu.numa_id, 1);
  EXPECT_EQ(cpu0.cpu.vendor, "GenuineIntel");
  EXPECT_EQ(cpu0.cpu.model_id, "79");
  EXPECT_EQ(cpu0.cpu.family_id, "6");

  ASSERT_EQ(t->GpuCount(), 2u);
  auto g0 = t->FindGpu(0), g1 = t->FindGpu(1);
  ASSERT_TRUE(g0 && g1);
  EXPECT_EQ(t->node(*g0).pci.bus_id, "0000:04:00.0");
  EXPECT_EQ(t->node(*g0).gpu.cuda_index, 0);
  EXPECT_EQ(t->node(*g0).gpu.name, "Tesla V100-PCIE-16GB");
  EXPECT_EQ(t->node(*g0).pci.vendor_id, "0x10de");
  EXPECT_EQ(t->node(*g0).pci.device_id, "0x1db4");
  EXPECT_EQ(t->node(*g0).pci.link.gen, 3);
  EXPECT_EQ(t->node(*g0).pci.link.width, 16);
  EXPECT_EQ(t->node(*g1).pci.bus_id, "0000:05:00.0");
  EXPECT_EQ(t->CpuOf(*g0), t->Cpus()[0]);

  ASSERT_EQ(t->NicCount(), 2u);
  auto eth = t->FindNic("eth0");
  auto ib = t->FindNic("mlx5_0");
  ASSERT_TRUE(eth.has_value());
  ASSERT_TRUE(ib.has_value());
  EXPECT_EQ(t->node(*eth).nic.kind, NicKind::kEthernet);
  EXPECT_EQ(t->node(*ib).nic.kind, NicKind::kInfiniBand);
  EXPECT_EQ(t->node(*ib).nic.netdevs, std::vector<std::string>{"ib0"});
  EXPECT_EQ(t->node(*ib).pci.bus_id, "0000:81:00.0");
  EXPECT_EQ(t->CpuOf(*ib), t->Cpus()[1]);

  // The PLX upstream port (depth 2) is the one switch; root and downstream ports are collapsed.
  ASSERT_EQ(t->NodesOfKind(NodeKind::kPciSwitch).size(), 1u);
  const NodeId sw = t->NodesOfKind(NodeKind::kPciSwitch)[0];
  EXPECT_EQ(t->node(sw).pci.bus_id, "0000:02:00.0");
  EXPECT_EQ(t->node(*g0).parent, sw);
  EXPECT_EQ(t->node(*eth).parent, sw);
  EXPECT_EQ(t->NodesOfKind(NodeKind::kHostBridge).size(), 2u);

  auto label = [&](NodeId a, NodeId b) {
    auto p = ClassifyPath(*t, a, b);
    return p.ok() ? p->Label() : p.status().ToString();
  };
  EXPECT_EQ(label(*g0, *g1), "PIX");
  EXPECT_EQ(label(*g0, *eth), "PIX");
  EXPECT_EQ(label(*g0, *ib), "SYS");
  auto p = ClassifyPath(*t, *g0, *g1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->p2p);

  // Same matrix after an NCCL XML round trip (the tree is complete enough to export).
  auto xml = ExportNcclXml(*t);
  ASSERT_TRUE(xml.ok()) << xml.status().ToString();
  auto again = ImportNcclXml(*xml, "again.xml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ExportNvsmiMatrix(*again), ExportNvsmiMatrix(*t));
}

// hwloc 1.x on a machine whose sockets hold several NUMA nodes (Socket above NUMANode): one CPU per
// socket; devices below either NUMANode land under that CPU.
TEST(HwlocV1Import, SocketAboveNumaNode) {
  constexpr const char* kXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<topology>
  <object type="Machine" os_index="0" cpuset="0x000000ff">
    <object type="Socket" os_index="0" cpuset="0x000000ff">
      <object type="NUMANode" os_index="0" cpuset="0x0000000f" local_memory="1000">
        <object type="Bridge" os_index="0" bridge_type="0-1" depth="0" bridge_pci="0000:[00-04]">
          <object type="PCIDev" os_index="4096" pci_busid="0000:01:00.0" pci_type="0302 [10de:102d] [10de:106c] a1"/>
        </object>
      </object>
      <object type="NUMANode" os_index="1" cpuset="0x000000f0" local_memory="1000">
        <object type="Bridge" os_index="1" bridge_type="0-1" depth="0" bridge_pci="0000:[40-44]">
          <object type="PCIDev" os_index="266240" pci_busid="0000:41:00.0" pci_type="0302 [10de:102d] [10de:106c] a1"/>
        </object>
      </object>
    </object>
  </object>
</topology>
)";
  auto t = ImportHwlocXml(kXml, "magny.xml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->Cpus().size(), 1u);
  ASSERT_EQ(t->GpuCount(), 2u);
  EXPECT_EQ(t->CpuOf(*t->FindGpu(0)), t->Cpus()[0]);
  EXPECT_EQ(t->CpuOf(*t->FindGpu(1)), t->Cpus()[0]);
  auto p = ClassifyPath(*t, *t->FindGpu(0), *t->FindGpu(1));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Label(), "NODE") << "two host bridges under one CPU";
}

}  // namespace
}  // namespace commkit::topology
