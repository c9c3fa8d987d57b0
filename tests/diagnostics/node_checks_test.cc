#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "commkit/diagnostics/check.h"
#include "commkit/diagnostics/snapshot.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

CheckRecord RunOne(const std::string& machine, const std::string& id) {
  CheckContext ctx{SystemView::Replay(testing::TestDataDir() / "gpudoctor" / machine)};
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{id}, {}});
  EXPECT_EQ(rep.records.size(), 1u);
  return rep.records.at(0);
}

CheckOutcome RunIn(const testing::TempDir& dir, const std::string& id) {
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{id}, {}});
  EXPECT_EQ(rep.records.size(), 1u);
  return rep.records.at(0).outcome;
}

TEST(NodeChecksTest, ShmTooSmallInContainerWith8Gpus) {
  CheckRecord r = RunOne("container-shm64mb-8gpu", "shm.size");
  EXPECT_EQ(r.outcome.status, CheckStatus::kFail);
  EXPECT_NE(r.outcome.summary.find("for 8 GPUs"), std::string::npos) << r.outcome.summary;
  EXPECT_NE(r.outcome.fix.find("--shm-size=1g"), std::string::npos);
  EXPECT_NE(r.outcome.fix.find("NCCL_SHM_DISABLE=1"), std::string::npos);
  EXPECT_NE(r.outcome.fix.find("medium: Memory"), std::string::npos);
  CheckRecord gpu = RunOne("container-shm64mb-8gpu", "gpu.driver");
  EXPECT_EQ(gpu.outcome.summary, "NVIDIA driver 550.54.15");
  EXPECT_EQ(RunOne("container-shm64mb-8gpu", "gpu.persistence").outcome.status, CheckStatus::kPass);
}

TEST(NodeChecksTest, MemlockWithIb) {
  CheckRecord r = RunOne("host-memlock64k-ib", "limits.memlock");
  EXPECT_EQ(r.outcome.status, CheckStatus::kFail);
  EXPECT_NE(r.outcome.summary.find("64 KiB"), std::string::npos) << r.outcome.summary;
  EXPECT_NE(r.outcome.fix.find("--ulimit memlock=-1"), std::string::npos);
  EXPECT_NE(r.outcome.fix.find("PropagateResourceLimits"), std::string::npos);
  EXPECT_NE(r.outcome.fix.find("LimitMEMLOCK=infinity"), std::string::npos);
  EXPECT_EQ(RunOne("host-memlock64k-ib", "rdma.uverbs").outcome.status, CheckStatus::kPass);
}

TEST(NodeChecksTest, LowMemlockWithoutRdmaPasses) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/rlimit.memlock", "soft=65536 hard=65536");
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"limits.memlock"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kPass);
  dir.Write(".commkit/facts/rlimit.memlock", "soft=unlimited hard=unlimited");
  dir.Write("sys/class/infiniband/mlx5_0/node_type", "1");
  rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"limits.memlock"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kPass);
  EXPECT_EQ(rep.records.at(0).outcome.summary, "memlock is unlimited");
}

TEST(NodeChecksTest, FabricManagerOnNvswitchSystem) {
  testing::TempDir dir;
  dir.Write("sys/bus/pci/devices/0000:05:00.0/vendor", "0x10de\n");
  dir.Write("sys/bus/pci/devices/0000:05:00.0/class", "0x068000\n");
  dir.Write("sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de\n");
  dir.Write("sys/bus/pci/devices/0000:18:00.0/class", "0x030200\n");
  dir.Write(".commkit/facts/systemctl.nvidia-fabricmanager", "inactive");
  auto run = [&] {
    return RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"gpu.fabricmanager"}, {}})
        .records.at(0)
        .outcome;
  };
  CheckOutcome o = run();
  EXPECT_EQ(o.status, CheckStatus::kFail);
  EXPECT_EQ(o.evidence.at(0), "NVSwitch PCI devices: 0000:05:00.0");
  EXPECT_NE(o.fix.find("systemctl enable --now nvidia-fabricmanager"), std::string::npos);
  dir.Write(".commkit/facts/systemctl.nvidia-fabricmanager", "active");
  EXPECT_EQ(run().status, CheckStatus::kPass);
}

TEST(NodeChecksTest, PeermemWithIbAndGpus) {
  testing::TempDir dir;
  dir.Write("sys/class/infiniband/mlx5_0/node_type", "1");
  dir.Write("proc/driver/nvidia/gpus/0000:18:00.0/information", "Model: H100\n");
  auto run = [&] {
    return RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"rdma.peermem"}, {}})
        .records.at(0)
        .outcome;
  };
  EXPECT_EQ(run().status, CheckStatus::kWarn);
  EXPECT_NE(run().fix.find("modprobe nvidia_peermem"), std::string::npos);
  dir.Write("sys/module/nvidia_peermem/refcnt", "0");
  EXPECT_EQ(run().status, CheckStatus::kPass);
}

TEST(NodeChecksTest, Xid79) {
  CheckRecord r = RunOne("host-xid79", "kernel.xid");
  EXPECT_EQ(r.outcome.status, CheckStatus::kFail);
  ASSERT_EQ(r.outcome.evidence.size(), 1u);
  EXPECT_NE(r.outcome.evidence[0].find("/var/log/kern.log:2: Xid 79 on PCI:0000:3b:00: GPU has fallen off the bus"),
            std::string::npos)
      << r.outcome.evidence[0];
  EXPECT_NE(r.outcome.fix.find("drain the node"), std::string::npos);
}

TEST(NodeChecksTest, SocketIfnameNamesMissingInterface) {
  CheckRecord r = RunOne("host-ifname-eth0-no-eth0", "env.nccl");
  EXPECT_EQ(r.outcome.status, CheckStatus::kFail);
  EXPECT_NE(r.outcome.summary.find("NCCL_SOCKET_IFNAME=eth0 matches no interface"), std::string::npos);
  EXPECT_EQ(r.outcome.fix, "export NCCL_SOCKET_IFNAME=ens5 (or unset NCCL_SOCKET_IFNAME)");
}

TEST(NodeChecksTest, TwoNcclVersions) {
  CheckRecord r = RunOne("host-two-nccl", "nccl.libs");
  EXPECT_EQ(r.outcome.status, CheckStatus::kWarn);
  EXPECT_NE(r.outcome.summary.find("2.18.1, 2.21.5"), std::string::npos) << r.outcome.summary;
  EXPECT_NE(r.outcome.fix.find("pip uninstall"), std::string::npos);
}

TEST(NodeChecksTest, NcclSymlinksAreOneLibraryAndTheWheelsUnversionedLibraryCounts) {
  testing::TempDir dir;
  const std::string sys = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
  dir.Write(".commkit/facts/nccl.libs", sys + " -> libnccl.so.2.18.1\n" + sys + ".18.1");
  CheckContext ctx{SystemView::Replay(dir.path())};
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"nccl.libs"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kPass);
  EXPECT_EQ(rep.records.at(0).outcome.summary, "NCCL 2.18.1");
  // PyTorch's nvidia-nccl-cu12 wheel ships libnccl.so.2 only: a second library, named.
  const std::string wheel = "/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2";
  dir.Write(".commkit/facts/nccl.libs", sys + " -> libnccl.so.2.18.1\n" + sys + ".18.1\n" + wheel);
  rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"nccl.libs"}, {}});
  const CheckOutcome& o = rep.records.at(0).outcome;
  EXPECT_EQ(o.status, CheckStatus::kWarn);
  EXPECT_NE(o.summary.find("2.18.1, 2.x (version not in the file name)"), std::string::npos) << o.summary;
  bool wheel_named = false;
  for (const auto& e : o.evidence) wheel_named = wheel_named || e.find(wheel) != std::string::npos;
  EXPECT_TRUE(wheel_named);
}

TEST(NodeChecksTest, AnUnversionedNcclTakesItsVersionFromTheHeaderBesideIt) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/nccl.libs", "/usr/local/cuda/lib64/libnccl.so.2");
  dir.Write("usr/local/cuda/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n");
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"nccl.libs"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kPass);
  EXPECT_EQ(rep.records.at(0).outcome.summary, "NCCL 2.28.9");
}

bool HasEvidence(const CheckOutcome& o, const std::string& needle) {
  for (const auto& e : o.evidence)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

// nccl.libs goes through nccl_libraries: the ld.so.conf directories are searched, and the evidence
// says which net plugin NCCL would load, or why none.
TEST(NodeChecksTest, NcclLibsSearchesLdSoConfAndNamesTheNetPlugin) {
  testing::TempDir dir;
  dir.Write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  dir.Write("etc/ld.so.conf.d/nccl.conf", "/opt/nccl-2.23/lib\n");
  dir.Write("opt/nccl-2.23/lib/libnccl.so.2.23.4", "ELF");
  dir.Write(".commkit/facts/env", "NCCL_DEBUG=WARN\n");
  CheckOutcome o = RunIn(dir, "nccl.libs");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_EQ(o.summary, "NCCL 2.23.4");
  EXPECT_TRUE(HasEvidence(o, "NCCL 2.23.4: /opt/nccl-2.23/lib/libnccl.so.2.23.4"));
  EXPECT_TRUE(HasEvidence(o, "NCCL net plugin: none (NCCL_NET_PLUGIN unset: libnccl-net.so is not on the loader path)"));
  EXPECT_TRUE(HasEvidence(o, "loader path (LD_LIBRARY_PATH, /etc/ld.so.conf, system dirs): /opt/nccl-2.23/lib /lib/x86_64-linux-gnu"));

  // aws-ofi-nccl off the loader path: named as a library NCCL would not load.
  dir.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "ELF");
  o = RunIn(dir, "nccl.libs");
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_TRUE(HasEvidence(o, "plugin libraries NCCL would not load (off the loader path, or not a name NCCL looks for): "
                             "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"));
  // On the loader path and named by a comma list: the entry that is there loads, the absent one is named.
  dir.Write(".commkit/facts/env", "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib\nNCCL_NET_PLUGIN=gib,ofi\n");
  o = RunIn(dir, "nccl.libs");
  EXPECT_TRUE(HasEvidence(o, "NCCL net plugin: /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so (NCCL_NET_PLUGIN=gib,ofi)"));
  EXPECT_TRUE(HasEvidence(o, "NCCL_NET_PLUGIN entry 'gib': gib, libnccl-net-gib.so not found"));
  // Nothing found: skip, with where it looked.
  std::filesystem::remove(dir.path() / "opt/nccl-2.23/lib/libnccl.so.2.23.4");
  o = RunIn(dir, "nccl.libs");
  EXPECT_EQ(o.status, CheckStatus::kSkip) << o.summary;
  EXPECT_TRUE(HasEvidence(o, "searched: /opt/amazon/ofi-nccl/lib /opt/nccl-2.23/lib"));
}

// A capture of a machine (a tree under a live view's root) replays nccl.libs byte for byte: the scan is
// the fact "nccl.libraries", and the links (/lib -> usr/lib) and wheel directories the search looks at
// are recorded.
TEST(NodeChecksTest, NcclLibsCaptureReplaysIdentically) {
  testing::TempDir machine, capture;
  const std::filesystem::path m = machine.path();
  std::filesystem::create_directories(m / "usr/lib/x86_64-linux-gnu");
  std::filesystem::create_symlink("usr/lib", m / "lib");
  machine.Write("usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "ELF");
  std::filesystem::create_symlink("libnccl.so.2.21.5", m / "usr/lib/x86_64-linux-gnu/libnccl.so.2");
  machine.Write("usr/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2", "ELF");
  machine.Write("usr/lib/python3.11/site-packages/nvidia/nccl/include/nccl.h",
                "#define NCCL_MAJOR 2\n#define NCCL_MINOR 23\n#define NCCL_PATCH 4\n");
  std::filesystem::create_directories(m / "usr/lib/python3.12/site-packages");
  machine.Write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  machine.Write("etc/ld.so.conf.d/aws-ofi-nccl.conf", "/opt/amazon/ofi-nccl/lib\n");
  machine.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "ELF");
  std::filesystem::create_symlink("libnccl-net-ofi.so", m / "opt/amazon/ofi-nccl/lib/libnccl-net.so");

  auto live = std::make_shared<SystemView>(m, true);
  ASSERT_TRUE(live->StartCapture(capture.path()).ok());
  Report a = RunChecks(CheckRegistry::BuiltIn(), CheckContext{live}, {{"nccl.libs"}, {}});
  live->StopCapture();
  Report b = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(capture.path())}, {{"nccl.libs"}, {}});
  EXPECT_EQ(a.ToJson(), b.ToJson());
  EXPECT_EQ(a.ToText(false), b.ToText(false));
  const CheckOutcome& o = b.records.at(0).outcome;
  EXPECT_EQ(o.status, CheckStatus::kWarn) << o.summary;
  EXPECT_NE(o.summary.find("2.21.5, 2.23.4"), std::string::npos) << o.summary;
  EXPECT_TRUE(HasEvidence(o, "NCCL net plugin: /opt/amazon/ofi-nccl/lib/libnccl-net.so -> libnccl-net-ofi.so"));
  EXPECT_TRUE(HasEvidence(o, "NCCL 2.23.4: /usr/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"));
  EXPECT_TRUE(std::filesystem::exists(capture.path() / ".commkit/facts/nccl.libraries"));
}

// A machine with interfaces (name, address/prefix) all up, routes to 172.17/16 and 10.1/16, and env.
void WriteNetMachine(testing::TempDir& dir, const std::vector<std::pair<std::string, std::string>>& ifaces,
                     const std::string& env) {
  std::string addrs, routes = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n";
  for (const auto& [name, cidr] : ifaces) {
    dir.Write("sys/class/net/" + name + "/operstate", name == "lo" ? "unknown" : "up");
    dir.Write("sys/class/net/" + name + "/type", name == "lo" ? "772" : "1");
    dir.Write("sys/class/net/" + name + "/mtu", "1500");
    auto slash = cidr.find('/');
    addrs += name + " inet " + cidr.substr(0, slash) + " " + cidr.substr(slash + 1) + "\n";
    if (cidr.rfind("172.17.", 0) == 0) routes += name + "\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
    if (cidr.rfind("10.1.", 0) == 0) routes += name + "\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
  }
  dir.Write(".commkit/facts/getifaddrs", addrs);
  dir.Write("proc/net/route", routes);
  dir.Write(".commkit/facts/env", env);
}

CheckOutcome NcclSocketOn(testing::TempDir& dir) {
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"net.nccl_socket"}, {}});
  return rep.records.at(0).outcome;
}

TEST(NodeChecksTest, NcclSocketPicksTheInterfaceThatRoutesToTheMaster) {
  testing::TempDir dir;
  WriteNetMachine(dir, {{"docker0", "172.17.0.1/16"}, {"ens5", "10.1.0.7/16"}, {"lo", "127.0.0.1/8"}}, "MASTER_ADDR=10.1.0.5");
  CheckOutcome o = NcclSocketOn(dir);
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_NE(o.summary.find("NCCL would use ens5 (10.1.0.7)"), std::string::npos) << o.summary;
}

TEST(NodeChecksTest, NcclSocketOnTheWrongInterfaceSaysWhichOneToUse) {
  // A container-style eth0 on the docker network sorts first; the nodes talk over ens6.
  testing::TempDir dir;
  WriteNetMachine(dir, {{"eth0", "172.17.0.2/16"}, {"ens6", "10.1.0.7/16"}, {"lo", "127.0.0.1/8"}}, "MASTER_ADDR=10.1.0.5");
  CheckOutcome o = NcclSocketOn(dir);
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("NCCL would bootstrap on eth0 (172.17.0.2) but MASTER_ADDR=10.1.0.5 is reached through ens6"),
            std::string::npos)
      << o.summary;
  EXPECT_EQ(o.fix.rfind("export NCCL_SOCKET_IFNAME=ens6", 0), 0u) << o.fix;
}

TEST(NodeChecksTest, NcclSocketExcludingEverythingFails) {
  testing::TempDir dir;
  WriteNetMachine(dir, {{"ens6", "10.1.0.7/16"}, {"lo", "127.0.0.1/8"}}, "MASTER_ADDR=10.1.0.5\nNCCL_SOCKET_IFNAME=^ens,lo");
  CheckOutcome o = NcclSocketOn(dir);
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_NE(o.summary.find("no socket interface"), std::string::npos) << o.summary;
  EXPECT_EQ(o.fix, "export NCCL_SOCKET_IFNAME=ens6");
}

bool HasLine(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

// tests/data/gpudoctor/host-ens5-route-eth0-down: eth0 exists but is down (unplugged, no address), the only
// route (default via 172.31.32.1) is on ens5, and the job's script hard-codes NCCL_SOCKET_IFNAME=eth0.
TEST(NodeChecksTest, NcclSocketIfnameEth0DownWhileTheRouteIsOnEns5) {
  CheckRecord r = RunOne("host-ens5-route-eth0-down", "net.nccl_socket");
  const CheckOutcome& o = r.outcome;
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_EQ(o.summary,
            "NCCL would find no socket interface (NCCL_SOCKET_IFNAME=eth0: eth0 is down (operstate down) and has no "
            "address): init fails with 'Bootstrap : no socket interface found' / ncclInternalError");
  EXPECT_EQ(o.fix, "export NCCL_SOCKET_IFNAME=ens5");
  EXPECT_TRUE(HasLine(o.evidence, "eth0: down, mtu 1500"));
  EXPECT_TRUE(HasLine(o.evidence, "ens5: up, mtu 9001, 172.31.41.17/20"));
  EXPECT_TRUE(HasLine(o.evidence, "default route: via 172.31.32.1 dev ens5"));
  EXPECT_TRUE(HasLine(o.evidence, "NCCL_SOCKET_IFNAME=eth0 matches an unusable interface: eth0 is down (operstate down)"));
  // eth0 exists, so the environment check alone would not catch it.
  EXPECT_EQ(RunOne("host-ens5-route-eth0-down", "env.nccl").outcome.status, CheckStatus::kPass);
}

TEST(NodeChecksTest, NcclSocketAutoOrderPicksADownEth0WithAStaleAddress) {
  // The same host with a static address left on the unplugged eth0 and no NCCL_SOCKET_IFNAME: NCCL's
  // automatic order ("^docker,lo", getifaddrs order) takes eth0.
  testing::TempDir dir;
  std::filesystem::copy(testing::TestDataDir() / "gpudoctor" / "host-ens5-route-eth0-down", dir.path(),
                        std::filesystem::copy_options::recursive);
  dir.Write(".commkit/facts/getifaddrs", "lo inet 127.0.0.1 8\neth0 inet 10.0.0.5 24\nens5 inet 172.31.41.17 20\n");
  dir.Write(".commkit/facts/env", "NCCL_DEBUG=INFO\n");
  CheckOutcome o = NcclSocketOn(dir);
  EXPECT_EQ(o.status, CheckStatus::kFail) << o.summary;
  EXPECT_EQ(o.summary, "NCCL would use eth0 (10.0.0.5), whose link is down (operstate down): connections through it hang or time out");
  EXPECT_EQ(o.fix, "export NCCL_SOCKET_IFNAME=ens5 (ens5: it holds the default route)");
  // Following the fix.
  dir.Write(".commkit/facts/env", "NCCL_DEBUG=INFO\nNCCL_SOCKET_IFNAME=ens5\n");
  o = NcclSocketOn(dir);
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  EXPECT_EQ(o.summary, "NCCL would use ens5 (172.31.41.17) (NCCL_SOCKET_IFNAME=ens5)");
}

TEST(NodeChecksTest, EnvTyposAndContradictions) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/env", "NCCL_P2P_DISABLE=1\nNCCL_P2P_LEVEL=NVL\nNCCL_SOCKET_IFNAM=eth0\nNCCL_IB_DISABLE=1\nNCCL_IB_HCA=mlx5_0");
  CheckContext ctx{SystemView::Replay(dir.path())};
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"env.nccl"}, {}});
  const CheckOutcome& o = rep.records.at(0).outcome;
  EXPECT_EQ(o.status, CheckStatus::kWarn);
  EXPECT_NE(o.summary.find("NCCL_SOCKET_IFNAM is not an NCCL variable (typo of NCCL_SOCKET_IFNAME?)"), std::string::npos);
  EXPECT_NE(o.summary.find("contradictory"), std::string::npos);
  EXPECT_NE(o.fix.find("export NCCL_SOCKET_IFNAME=eth0; unset NCCL_SOCKET_IFNAM"), std::string::npos);
}

// NVIDIA's CUDA images set NCCL_VERSION (seen on the H100 of docs/gpu-validation.md): a label,
// explained as such, never reported as an unknown NCCL variable or a typo.
TEST(NodeChecksTest, ContainerImageNcclVersionIsALabel) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/env", "NCCL_VERSION=2.28.3-1\nNCCL_DEBUG=WARN");
  Report rep = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"env.nccl"}, {}});
  const CheckOutcome& o = rep.records.at(0).outcome;
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.summary;
  bool label = false;
  for (const std::string& e : o.evidence) {
    EXPECT_EQ(e.find("is not in gpudoctor's list"), std::string::npos) << e;
    if (e.find("NCCL_VERSION=2.28.3-1 is the container image's label") != std::string::npos) label = true;
  }
  EXPECT_TRUE(label);
}

TEST(NodeChecksTest, CudaVisibleDevicesOutOfRange) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=0,1,2");
  dir.Write("proc/driver/nvidia/gpus/0000:18:00.0/information", "Model: H100\n");
  dir.Write("proc/driver/nvidia/gpus/0000:2a:00.0/information", "Model: H100\n");
  auto run = [&] {
    return RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"env.nccl"}, {}})
        .records.at(0)
        .outcome;
  };
  CheckOutcome o = run();
  EXPECT_EQ(o.status, CheckStatus::kWarn);
  EXPECT_NE(o.summary.find("names GPU 2 but the node has 2"), std::string::npos) << o.summary;
  dir.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=1,0");
  EXPECT_EQ(run().status, CheckStatus::kPass);
  dir.Write(".commkit/facts/env", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(run().status, CheckStatus::kWarn);
}

TEST(NodeChecksTest, NoDriverSkipsWithReason) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/dlopen.nvml", "libnvidia-ml.so.1 not found");
  dir.Write(".commkit/facts/dlopen.cuda", "libcuda.so.1 not found");
  CheckContext ctx{SystemView::Replay(dir.path())};
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"gpu"}, {}});
  for (const CheckRecord& r : rep.records) EXPECT_EQ(r.outcome.status, CheckStatus::kSkip) << r.info.id;
  EXPECT_EQ(rep.records.at(0).outcome.summary, "libnvidia-ml.so.1 not found");
}

TEST(NodeChecksTest, HostnameLoopbackOnly) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/hostname", "node1");
  dir.Write(".commkit/facts/hostname.addresses", "127.0.1.1 127.0.1.1");
  CheckContext ctx{SystemView::Replay(dir.path())};
  Report rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"net.hostname"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kWarn);
  dir.Write(".commkit/facts/hostname.addresses", "10.0.0.5 127.0.1.1");
  rep = RunChecks(CheckRegistry::BuiltIn(), ctx, {{"net.hostname"}, {}});
  EXPECT_EQ(rep.records.at(0).outcome.status, CheckStatus::kPass);
}

TEST(SnapshotTest, LiveCaptureReplaysIdentically) {
  testing::TempDir dir;
  for (const char* out : {"snap", "snap.tar.gz"}) {
    auto live = WriteSnapshot(CheckRegistry::BuiltIn(), dir.path() / out);
    ASSERT_TRUE(live.ok()) << live.status().ToString();
    auto snap = SnapshotView::Open(dir.path() / out);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    Report replay = RunChecks(CheckRegistry::BuiltIn(), CheckContext{(*snap)->view()}, {});
    EXPECT_EQ(live->ToJson(), replay.ToJson()) << out;
    EXPECT_EQ(live->ToText(false), replay.ToText(false)) << out;
  }
}

}  // namespace
}  // namespace commkit::diagnostics
