// ProbeTopology and Advise over sysfs-style machine trees built by this test (g5, p4d, RoCE, VM, ens5).
#include "commkit/topology/probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "commkit/topology/advisor.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;

// Builds a machine tree: PCI functions under /sys/devices/pci0000:XX/<chain>, /sys/bus/pci/devices
// links, NUMA nodes, NICs, RDMA devices and facts.
class Machine {
 public:
  explicit Machine(const TempDir& dir) : dir_(dir) {
    dir_.Write("proc/cpuinfo", "vendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fpu sse hypervisor\n");
    dir_.Write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p1\n");
    fs::create_directories(dir_.path() / "sys/bus/pci/devices");
    fs::create_directories(dir_.path() / "sys/class/net");
  }
  void Numa(int n, const std::string& cpus) { dir_.Write("sys/devices/system/node/node" + std::to_string(n) + "/cpulist", cpus + "\n"); }
  // chain: {"0000:00:01.0", "0000:01:00.0", ...}; the last is the device.
  std::string Pci(const std::string& root, const std::vector<std::string>& chain, const std::string& cls,
                  const std::string& vendor, int numa) {
    std::string rel = "sys/devices/" + root;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      rel += "/" + chain[i];
      const bool last = i + 1 == chain.size();
      if (!fs::exists(dir_.path() / rel / "class")) {
        dir_.Write(rel + "/class", (last ? cls : "0x060400") + "\n");
        dir_.Write(rel + "/vendor", (last ? vendor : "0x1000") + "\n");
        dir_.Write(rel + "/device", "0x1234\n");
        dir_.Write(rel + "/numa_node", std::to_string(numa) + "\n");
        dir_.Write(rel + "/current_link_speed", "16.0 GT/s PCIe\n");
        dir_.Write(rel + "/max_link_speed", "16.0 GT/s PCIe\n");
        dir_.Write(rel + "/current_link_width", "16\n");
        dir_.Write(rel + "/max_link_width", "16\n");
        fs::create_symlink("../../../" + rel.substr(4), dir_.path() / "sys/bus/pci/devices" / chain[i]);
      }
    }
    return rel;
  }
  void Net(const std::string& name, const std::string& pci_rel, const std::string& state, const std::string& driver) {
    std::string net = pci_rel + "/net/" + name;
    dir_.Write(net + "/operstate", state + "\n");
    dir_.Write(net + "/type", "1\n");
    dir_.Write(net + "/mtu", "9001\n");
    dir_.Write(net + "/speed", state == "up" ? "100000\n" : "-1\n");
    fs::create_symlink("../../../" + fs::path(pci_rel).filename().string(), dir_.path() / net / "device");
    Driver(pci_rel, driver);
    fs::create_symlink("../../" + net.substr(4), dir_.path() / "sys/class/net" / name);
  }
  void Driver(const std::string& pci_rel, const std::string& driver) {
    fs::create_directories(dir_.path() / "sys/bus/pci/drivers" / driver);
    if (!fs::exists(dir_.path() / pci_rel / "driver", ec_))
      fs::create_symlink(fs::relative(dir_.path() / "sys/bus/pci/drivers" / driver, dir_.path() / pci_rel),
                         dir_.path() / pci_rel / "driver");
  }
  void Lo() {
    dir_.Write("sys/devices/virtual/net/lo/operstate", "unknown\n");
    dir_.Write("sys/devices/virtual/net/lo/type", "772\n");
    fs::create_symlink("../../devices/virtual/net/lo", dir_.path() / "sys/class/net/lo");
  }
  // An RDMA device with one port; gids: {index, gid, type, ndev}.
  void Rdma(const std::string& name, const std::string& pci_rel, const std::string& driver, const std::string& layer,
            const std::string& state, const std::vector<std::array<std::string, 4>>& gids = {}) {
    std::string dev = pci_rel + "/infiniband/" + name;
    std::string port = dev + "/ports/1";
    dir_.Write(port + "/state", state == "ACTIVE" ? "4: ACTIVE\n" : "1: DOWN\n");
    dir_.Write(port + "/phys_state", "5: LinkUp\n");
    dir_.Write(port + "/rate", "100 Gb/sec (4X EDR)\n");
    dir_.Write(port + "/link_layer", layer + "\n");
    for (const auto& g : gids) {
      dir_.Write(port + "/gids/" + g[0], g[1] + "\n");
      dir_.Write(port + "/gid_attrs/types/" + g[0], g[2] + "\n");
      dir_.Write(port + "/gid_attrs/ndevs/" + g[0], g[3] + "\n");
    }
    fs::create_symlink("../../../" + fs::path(pci_rel).filename().string(), dir_.path() / dev / "device");
    Driver(pci_rel, driver);
    fs::create_directories(dir_.path() / "sys/class/infiniband");
    fs::create_symlink("../../" + dev.substr(4), dir_.path() / "sys/class/infiniband" / name);
  }
  void Fact(const std::string& name, const std::string& text) { dir_.Write(".commkit/facts/" + name, text); }
  void Write(const std::string& rel, const std::string& text) { dir_.Write(rel, text); }

 private:
  const TempDir& dir_;
  std::error_code ec_;
};

const char* kDefaultRouteEns5 =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "ens5\t00000000\t0100010A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "ens5\t0000010A\t00000000\t0001\t0\t0\t100\t00F0FFFF\t0\t0\t0\n";

std::string NvmlFourGpusNoP2p(const std::string& name, const std::vector<std::string>& bus) {
  std::string gpus, rows;
  for (std::size_t i = 0; i < bus.size(); ++i) {
    gpus += (i ? "," : "") + std::string("{\"index\":") + std::to_string(i) + ",\"name\":\"" + name + "\",\"bus_id\":\"" + bus[i] +
            "\",\"sm\":86,\"memory_bytes\":24146608128,\"persistence_mode\":true}";
    std::string row;
    for (std::size_t k = 0; k < bus.size(); ++k) row += std::string(k ? "," : "") + (i == k ? "\"X\"" : "\"NS\"");
    rows += (i ? "," : "") + ("[" + row + "]");
  }
  return "{\"available\":true,\"driver_version\":\"550.54.15\",\"cuda_driver_version\":12040,\"gpus\":[" + gpus +
         "],\"p2p_read\":[" + rows + "]}";
}

// AWS g5.12xlarge-like: 4x A10G on a flat PCIe root (VM), ENA ens5, no P2P.
void MakeG5(const TempDir& dir) {
  Machine m(dir);
  m.Numa(0, "0-47");
  std::vector<std::string> bus;
  for (int i = 0; i < 4; ++i) {
    std::string bdf = "0000:00:1" + std::to_string(i + 6) + ".0";
    m.Pci("pci0000:00", {bdf}, "0x030200", "0x10de", -1);
    bus.push_back("00000000:00:1" + std::to_string(i + 6) + ".0");
  }
  auto ena = m.Pci("pci0000:00", {"0000:00:05.0"}, "0x020000", "0x1d0f", -1);
  m.Net("ens5", ena, "up", "ena");
  m.Lo();
  m.Fact("getifaddrs", "lo inet 127.0.0.1 8\nens5 inet 10.1.2.3 20\n");
  m.Fact("nvml", NvmlFourGpusNoP2p("NVIDIA A10G", bus));
  m.Fact("cuda", "{\"available\":true,\"device_count\":4,\"can_access_peer\":[[false,false,false,false],[false,false,false,false],[false,false,false,false],[false,false,false,false]]}");
  m.Write("proc/net/route", kDefaultRouteEns5);
}

TEST(Probe, G5FlatVmWithoutPeerAccess) {
  TempDir dir;
  MakeG5(dir);
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->topology.GpuCount(), 4u);
  const Node& g0 = rep->topology.node(*rep->topology.FindGpu(0));
  EXPECT_EQ(g0.gpu.name, "NVIDIA A10G");
  EXPECT_EQ(g0.pci.link.gen, 4);
  EXPECT_TRUE(rep->system.pci_tree_flat);
  EXPECT_TRUE(rep->system.numa_unknown);
  EXPECT_TRUE(rep->system.hypervisor);
  EXPECT_TRUE(rep->gpu.AnyPairWithoutP2p());
  EXPECT_EQ(rep->topology.p2p_overrides().size(), 12u);
  EXPECT_EQ(rep->Prober("nvml")->state, ProberState::kOk);
  EXPECT_EQ(rep->Prober("rdma")->state, ProberState::kSkipped);
  ASSERT_NE(rep->topology.FindNic("ens5"), std::nullopt);

  AdvisorOptions opts;
  auto advice = Advise(*rep, opts);
  const Recommendation* p2p = advice.Find("NCCL_P2P_DISABLE");
  ASSERT_NE(p2p, nullptr);
  EXPECT_EQ(p2p->value, "1");
  EXPECT_NE(p2p->reason.find("peer access is not supported"), std::string::npos);
  ASSERT_NE(advice.Find("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_EQ(advice.Find("NCCL_SOCKET_IFNAME")->value, "ens5");
  // VM hides the PCIe tree: said as a finding, never as a made-up NCCL_TOPO_FILE path.
  EXPECT_EQ(advice.Find("NCCL_TOPO_FILE"), nullptr);
  EXPECT_TRUE(std::any_of(advice.findings.begin(), advice.findings.end(),
                          [](const std::string& f) { return f.find("then NCCL_TOPO_FILE=FILE") != std::string::npos; }));
  EXPECT_EQ(advice.Find("FI_PROVIDER"), nullptr);
  EXPECT_NE(advice.ToShell().find("export NCCL_P2P_DISABLE=1"), std::string::npos);
  EXPECT_NE(advice.ToEnvFile().find("\nNCCL_P2P_DISABLE=1\n"), std::string::npos);
  EXPECT_NE(advice.ToJson().find("\"NCCL_P2P_DISABLE\""), std::string::npos);
}

TEST(Probe, AdvisorNeverOverridesUserSettingsAndFlagsContradictions) {
  TempDir dir;
  MakeG5(dir);
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok());
  AdvisorOptions opts;
  opts.env = {{"NCCL_SOCKET_IFNAME", "eth0"}, {"NCCL_P2P_DISABLE", "0"}};
  auto advice = Advise(*rep, opts);
  const Recommendation* ifname = advice.Find("NCCL_SOCKET_IFNAME");
  ASSERT_NE(ifname, nullptr);
  EXPECT_TRUE(ifname->user_set);
  EXPECT_EQ(ifname->user_value, "eth0");
  EXPECT_TRUE(ifname->conflict) << "no eth0 on this host";
  EXPECT_TRUE(advice.Find("NCCL_P2P_DISABLE")->conflict);
  const std::string shell = advice.ToShell();
  EXPECT_EQ(shell.find("export NCCL_SOCKET_IFNAME"), std::string::npos);
  EXPECT_EQ(shell.find("export NCCL_P2P_DISABLE"), std::string::npos);
  EXPECT_EQ(advice.ToEnvFile().find("NCCL_SOCKET_IFNAME="), std::string::npos);
  EXPECT_NE(shell.find("already set by you"), std::string::npos);
}

TEST(Probe, P4dWithEfa) {
  TempDir dir;
  Machine m(dir);
  m.Numa(0, "0-23,48-71");
  m.Numa(1, "24-47,72-95");
  // Two PCIe switches, each with 2 GPUs and 2 EFA devices, plus ENA.
  for (int sw = 0; sw < 2; ++sw) {
    std::string root = sw == 0 ? "pci0000:10" : "pci0000:90";
    std::string up = sw == 0 ? "0000:10:00.0" : "0000:90:00.0";
    std::string busp = sw == 0 ? "1" : "9";
    for (int k = 0; k < 2; ++k) {
      std::string down = "0000:" + busp + "1:0" + std::to_string(k) + ".0";
      m.Pci(root, {up, down, "0000:" + busp + std::to_string(2 + k) + ":00.0"}, "0x030200", "0x10de", sw);
      auto efa = m.Pci(root, {up, down, "0000:" + busp + std::to_string(4 + k) + ":00.0"}, "0x020000", "0x1d0f", sw);
      m.Rdma("rdmap" + std::to_string(sw * 2 + k) + "s0", efa, "efa", "Unspecified", "ACTIVE");
    }
  }
  auto ena = m.Pci("pci0000:00", {"0000:00:05.0"}, "0x020000", "0x1d0f", 0);
  m.Net("ens32", ena, "up", "ena");
  m.Lo();
  m.Fact("getifaddrs", "lo inet 127.0.0.1 8\nens32 inet 172.31.4.5 20\n");
  m.Fact("nvml", "{\"available\":false,\"error\":\"libnvidia-ml.so.1 not found\"}");
  m.Write("dev/infiniband/uverbs0", "");
  m.Write("sys/module/nvidia_peermem/refcnt", "0\n");
  m.Write("proc/net/route", "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
                            "ens32\t00000000\t01101FAC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->topology.GpuCount(), 4u);
  EXPECT_TRUE(rep->system.efa_present);
  EXPECT_FALSE(rep->system.pci_tree_flat);
  EXPECT_EQ(rep->Prober("nvml")->state, ProberState::kSkipped);
  EXPECT_NE(rep->Prober("nvml")->detail.find("libnvidia-ml.so.1 not found"), std::string::npos);
  auto efa = rep->topology.FindNic("rdmap0s0");
  ASSERT_TRUE(efa.has_value());
  EXPECT_EQ(rep->topology.node(*efa).nic.kind, NicKind::kEfa);
  // The EFA device sits under the same switch as GPU0.
  const Node& efa_node = rep->topology.node(*efa);
  const Node& gpu0 = rep->topology.node(*rep->topology.FindGpu(0));
  EXPECT_EQ(efa_node.parent, gpu0.parent);
  EXPECT_EQ(rep->topology.CpuOf(*efa), rep->topology.FindCpuByNuma(0));

  auto advice = Advise(*rep, {});
  ASSERT_NE(advice.Find("FI_PROVIDER"), nullptr);
  EXPECT_EQ(advice.Find("FI_PROVIDER")->value, "efa");
  ASSERT_NE(advice.Find("FI_EFA_USE_DEVICE_RDMA"), nullptr);
  EXPECT_EQ(advice.Find("NCCL_IB_HCA"), nullptr) << "EFA is not an IB HCA";
  EXPECT_EQ(advice.Find("NCCL_SOCKET_IFNAME")->value, "ens32");
  bool plugin_note = false;
  for (const auto& f : advice.findings) plugin_note |= f.find("aws-ofi-nccl plugin") != std::string::npos;
  EXPECT_TRUE(plugin_note);
}

TEST(Probe, RoceGidIndexPicksIpv4MappedV2) {
  TempDir dir;
  Machine m(dir);
  m.Numa(0, "0-31");
  const std::string ll = "fe80:0000:0000:0000:0a00:00ff:fe00:0001";
  const std::string v4 = "0000:0000:0000:0000:0000:ffff:0a00:0a05";
  for (int i = 0; i < 2; ++i) {
    auto nic = m.Pci("pci0000:00", {"0000:00:02.0", "0000:0" + std::to_string(3 + i) + ":00.0"}, "0x020000", "0x15b3", 0);
    m.Net("enp" + std::to_string(3 + i) + "s0", nic, "up", "mlx5_core");
    m.Rdma("mlx5_" + std::to_string(i), nic, "mlx5_core", "Ethernet", "ACTIVE",
           {{{"0", ll, "IB/RoCE v1", "enp3s0"}}, {{"1", ll, "RoCE v2", "enp3s0"}}, {{"2", v4, "IB/RoCE v1", "enp3s0"}},
            {{"3", v4, "RoCE v2", "enp3s0"}}});
  }
  m.Lo();
  m.Fact("getifaddrs", "lo inet 127.0.0.1 8\nenp3s0 inet 10.0.10.5 24\nenp4s0 inet 10.0.11.5 24\n");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->gids.size(), 8u);
  EXPECT_TRUE(rep->gids[3].ipv4_mapped());
  EXPECT_FALSE(rep->gids[1].ipv4_mapped());
  EXPECT_EQ(rep->topology.node(*rep->topology.FindNic("mlx5_0")).nic.kind, NicKind::kRoCE);
  auto advice = Advise(*rep, {});
  ASSERT_NE(advice.Find("NCCL_IB_GID_INDEX"), nullptr);
  EXPECT_EQ(advice.Find("NCCL_IB_GID_INDEX")->value, "3");
  EXPECT_EQ(advice.Find("NCCL_IB_HCA"), nullptr) << "every HCA is active";

  AdvisorOptions user;
  user.env = {{"NCCL_IB_GID_INDEX", "1"}};
  auto a2 = Advise(*rep, user);
  EXPECT_TRUE(a2.Find("NCCL_IB_GID_INDEX")->conflict) << "GID 1 is link-local";
  EXPECT_EQ(a2.Find("NCCL_IB_GID_INDEX")->user_value, "1");
}

TEST(Probe, IfnamePicksEns5WhileEth0IsDown) {
  TempDir dir;
  Machine m(dir);
  m.Numa(0, "0-7");
  auto ens5 = m.Pci("pci0000:00", {"0000:00:05.0"}, "0x020000", "0x1d0f", 0);
  auto eth0 = m.Pci("pci0000:00", {"0000:00:06.0"}, "0x020000", "0x8086", 0);
  m.Net("ens5", ens5, "up", "ena");
  m.Net("eth0", eth0, "down", "e1000e");
  m.Lo();
  m.Fact("getifaddrs", "lo inet 127.0.0.1 8\neth0 inet 192.168.7.10 24\nens5 inet 10.1.2.3 20\n");
  m.Write("proc/net/route", std::string(kDefaultRouteEns5) + "eth0\t0007A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(rep.ok());
  AdvisorOptions opts;
  opts.master_addr = "10.1.9.9";
  auto advice = Advise(*rep, opts);
  ASSERT_NE(advice.Find("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_EQ(advice.Find("NCCL_SOCKET_IFNAME")->value, "ens5");
  EXPECT_NE(advice.Find("NCCL_SOCKET_IFNAME")->reason.find("10.1.9.9"), std::string::npos);
  bool warned = false;
  for (const auto& f : advice.findings) warned |= f.find("would pick eth0") != std::string::npos;
  EXPECT_TRUE(warned) << "NCCL's default choice (eth0, down) is reported";
  opts.master_addr = "192.168.7.1";
  EXPECT_EQ(Advise(*rep, opts).Find("NCCL_SOCKET_IFNAME")->value, "eth0");
}

TEST(Probe, LiveProbeOnThisMachineDegrades) {
  auto rep = ProbeTopology(*SystemView::Live());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_NE(rep->network.Find("lo"), nullptr);
  ASSERT_NE(rep->Prober("nvml"), nullptr);
  if (rep->topology.GpuCount() == 0) {
    EXPECT_NE(rep->Prober("nvml")->state, ProberState::kOk);
  }
  auto advice = Advise(*rep, AdvisorOptions::FromEnvironment());
  EXPECT_FALSE(advice.ToJson().empty());
}

TEST(Probe, CaptureReplaysExactly) {
  TempDir cap;
  auto live = SystemView::Live();
  ASSERT_TRUE(live->StartCapture(cap.path() / "c").ok());
  ProbeOptions o;
  o.pci = false;  // keep the capture small
  auto a = ProbeTopology(*live, o);
  live->StopCapture();
  ASSERT_TRUE(a.ok());
  auto b = ProbeTopology(*SystemView::Replay(cap.path() / "c"), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->network.interfaces.size(), b->network.interfaces.size());
  EXPECT_EQ(a->network.addresses.size(), b->network.addresses.size());
  EXPECT_EQ(a->network.routes.size(), b->network.routes.size());
  EXPECT_EQ(a->gpu.nvml_available, b->gpu.nvml_available);
  EXPECT_EQ(a->gpu.nvml_error, b->gpu.nvml_error);
}

}  // namespace
}  // namespace commkit::topology
