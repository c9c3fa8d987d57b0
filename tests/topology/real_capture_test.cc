// Topology files written by NCCL and nvidia-smi on a real machine (tests/data/topology/README.md):
// they import, keep what their writer said, and survive an export/re-import.
#include <gtest/gtest.h>

#include <optional>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

// Captured on the H100 VM of docs/gpu-validation.md (tests/data/topology/README.md): NCCL 2.28.9's own
// dump, and nvidia-smi 580's matrices with their underlined (escape-coded) header rows.
TEST(RealCaptureTest, H100VmNcclDumpAndNvidiaSmiMatrices) {
  const std::filesystem::path dir = testing::TestDataDir() / "topology";
  auto dump = ImportTopologyFile(dir / "h100-vm_nccl-2.28.9_topo-dump.xml");
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  ASSERT_EQ(dump->GpuCount(), 1u);
  ASSERT_EQ(dump->NicCount(), 1u);
  ASSERT_EQ(dump->Cpus().size(), 1u);
  const Node& gpu = dump->node(*dump->FindGpu(0));
  EXPECT_EQ(gpu.pci.bus_id, "0000:00:06.0");
  EXPECT_EQ(gpu.gpu.sm, 90);
  EXPECT_EQ(gpu.gpu.gdr, std::optional<bool>(true));
  EXPECT_EQ(gpu.pci.link.gen, 5);
  EXPECT_EQ(gpu.pci.link.width, 0) << "NCCL wrote link_width=\"0\": unknown, not x0";
  EXPECT_EQ(dump->node(dump->Cpus()[0]).cpu.numa_id, -1);
  const Node& nic = dump->node(dump->Nics()[0]);
  EXPECT_EQ(nic.nic.name, "eth0");
  EXPECT_EQ(nic.nic.SpeedGbps(), 10.0);
  auto path = ClassifyPath(*dump, *dump->FindGpu(0), dump->Nics()[0]);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(path->Label(), "PHB");  // the virtio NIC sits directly under the CPU
  // Export and re-import keep what NCCL said.
  auto xml = ExportNcclXml(*dump);
  ASSERT_TRUE(xml.ok()) << xml.status().ToString();
  auto again = ImportNcclXml(*xml, "re-export");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->GpuCount(), 1u);
  EXPECT_EQ(again->NicCount(), 1u);
  EXPECT_EQ(again->node(*again->FindGpu(0)).pci.bus_id, "0000:00:06.0");

  for (const char* file : {"h100-vm_nvidia-smi-580_topo-m.txt", "h100-vm_nvidia-smi-580_topo-p2p-r.txt"}) {
    SCOPED_TRACE(file);
    auto t = ImportTopologyFile(dir / file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->GpuCount(), 1u);
    EXPECT_EQ(t->NicCount(), 0u);
  }
  auto m = ImportTopologyFile(dir / "h100-vm_nvidia-smi-580_topo-m.txt");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->gpu_affinities().size(), 1u);
  EXPECT_EQ(m->gpu_affinities()[0].cpu_affinity, "0-15");
  EXPECT_EQ(m->gpu_affinities()[0].numa_affinity, "0");
}

}  // namespace
}  // namespace commkit::topology
