#include "commkit/topology/netif.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace commkit::topology {
namespace {

namespace fs = std::filesystem;
using commkit::testing::TempDir;

// A host whose default route is on ens5 while eth0 is down (but still holds an address), plus
// docker0 and lo: the classic "NCCL picked the wrong interface" machine.
void MakeEns5Host(const TempDir& dir) {
  auto nic = [&](const std::string& name, const std::string& pci, const std::string& state,
                 const std::string& speed) {
    std::string dev = "sys/devices/pci0000:00/" + pci;
    std::string net = dev + "/net/" + name;
    dir.Write(net + "/operstate", state + "\n");
    dir.Write(net + "/type", "1\n");
    dir.Write(net + "/mtu", "9001\n");
    dir.Write(net + "/speed", speed + "\n");
    dir.Write(net + "/carrier", state == "up" ? "1\n" : "0\n");
    dir.Write(net + "/address", "02:00:00:00:00:01\n");
    dir.Write("sys/bus/pci/drivers/ena/.keep", "");
    fs::create_symlink("../../../" + pci, dir.path() / net / "device");
    fs::create_symlink("../../../bus/pci/drivers/ena", dir.path() / dev / "driver");
    fs::create_directories(dir.path() / "sys/class/net");
    fs::create_symlink("../../devices/pci0000:00/" + pci + "/net/" + name, dir.path() / "sys/class/net" / name);
  };
  nic("ens5", "0000:00:05.0", "up", "25000");
  nic("eth0", "0000:00:06.0", "down", "-1");
  auto virt = [&](const std::string& name, const std::string& type, const std::string& state) {
    std::string net = "sys/devices/virtual/net/" + name;
    dir.Write(net + "/operstate", state + "\n");
    dir.Write(net + "/type", type + "\n");
    dir.Write(net + "/mtu", "1500\n");
    fs::create_directories(dir.path() / "sys/class/net");
    fs::create_symlink("../../devices/virtual/net/" + name, dir.path() / "sys/class/net" / name);
  };
  virt("lo", "772", "unknown");
  virt("docker0", "1", "down");
  dir.Write("sys/class/net/bonding_masters", "\n");
  dir.Write(".commkit/facts/getifaddrs",
            "lo inet 127.0.0.1 8\n"
            "eth0 inet 192.168.7.10 24\n"
            "ens5 inet 10.1.2.3 20\n"
            "docker0 inet 172.17.0.1 16\n"
            "lo inet6 ::1 128\n"
            "ens5 inet6 fe80::4a:1ff:fe00:1 64\n");
  // Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT (little-endian hex)
  dir.Write("proc/net/route",
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
            "ens5\t00000000\t0100010A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
            "ens5\t0000010A\t00000000\t0001\t0\t0\t100\t00F0FFFF\t0\t0\t0\n"
            "eth0\t0007A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
            "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n");
  dir.Write("proc/net/ipv6_route",
            "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 "
            "00000000000000000000000000000000 00000100 00000001 00000000 00000001     ens5\n"
            "00000000000000000000000000000001 80 00000000000000000000000000000000 00 "
            "00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n");
}

TEST(Netif, ProbeReadsInterfacesAddressesAndRoutes) {
  TempDir dir;
  MakeEns5Host(dir);
  auto view = SystemView::Replay(dir.path());
  auto net = ProbeNetwork(*view);
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  ASSERT_EQ(net->interfaces.size(), 4u);
  const NetInterface* ens5 = net->Find("ens5");
  ASSERT_NE(ens5, nullptr);
  EXPECT_TRUE(ens5->up);
  EXPECT_FALSE(ens5->is_virtual);
  EXPECT_EQ(ens5->pci_address, "0000:00:05.0");
  EXPECT_EQ(ens5->driver, "ena");
  EXPECT_EQ(ens5->speed_mbps, 25000);
  EXPECT_EQ(ens5->mtu, 9001);
  ASSERT_EQ(ens5->addresses.size(), 2u);
  EXPECT_TRUE(ens5->addresses[1].link_local);
  const NetInterface* eth0 = net->Find("eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_FALSE(eth0->up);
  EXPECT_FALSE(eth0->speed_mbps.has_value());
  EXPECT_TRUE(net->Find("lo")->loopback);
  EXPECT_TRUE(net->Find("lo")->up);
  EXPECT_TRUE(net->Find("docker0")->is_virtual);
  EXPECT_EQ(net->addresses.size(), 6u);
  ASSERT_EQ(net->routes.size(), 5u);
  EXPECT_EQ(net->routes[0].ifname, "ens5");
  EXPECT_TRUE(net->routes[0].is_default());
  EXPECT_EQ(net->routes[0].gateway, "10.1.0.1");
  EXPECT_EQ(net->routes[1].destination, "10.1.0.0");
  EXPECT_EQ(net->routes[1].prefix_len, 20);
  EXPECT_EQ(net->routes[4].family, AddressFamily::kIPv6);
  EXPECT_EQ(net->routes[4].destination, "fe80::");
  EXPECT_EQ(net->routes[4].prefix_len, 64);
  EXPECT_TRUE(net->warnings.empty());
}

TEST(Netif, RouteLookupPicksLongestPrefix) {
  TempDir dir;
  MakeEns5Host(dir);
  auto net = ProbeNetwork(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(net.ok());
  EXPECT_EQ(InterfaceForAddress(*net, "10.1.5.9")->ifname, "ens5");
  EXPECT_EQ(InterfaceForAddress(*net, "8.8.8.8")->ifname, "ens5") << "default route";
  EXPECT_EQ(InterfaceForAddress(*net, "192.168.7.99")->ifname, "eth0");
  auto local = InterfaceForAddress(*net, "10.1.2.3");
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->loopback);
  EXPECT_TRUE(InterfaceForAddress(*net, "127.0.0.1")->loopback);
  EXPECT_EQ(InterfaceForAddress(*net, "master-0").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(InterfaceForAddress(*net, "2001:db8::1").status().code(), StatusCode::kNotFound);
}

TEST(Netif, DefaultNcclChoiceTakesFirstNonDockerNonLoInGetifaddrsOrder) {
  TempDir dir;
  MakeEns5Host(dir);
  auto net = ProbeNetwork(*SystemView::Replay(dir.path()));
  ASSERT_TRUE(net.ok());
  NcclSocketOptions opts;
  auto choice = PredictNcclSocketInterfaces(*net, opts);
  EXPECT_EQ(choice.rule, "^docker,lo");
  ASSERT_EQ(choice.selected.size(), 2u);
  // NCCL takes eth0 first (getifaddrs order) even though its link is down: say so.
  EXPECT_EQ(choice.selected[0].ifname, "eth0");
  EXPECT_EQ(choice.selected[1].ifname, "ens5");
  EXPECT_EQ(choice.selected[1].address, "10.1.2.3") << "IPv4 before IPv6";
  ASSERT_FALSE(choice.notes.empty());
  EXPECT_NE(choice.notes[0].find("eth0 is selected but its link is down"), std::string::npos);

  opts.socket_ifname = "ens5";
  choice = PredictNcclSocketInterfaces(*net, opts);
  ASSERT_EQ(choice.selected.size(), 1u);
  EXPECT_EQ(choice.selected[0].ifname, "ens5");
  EXPECT_TRUE(choice.notes.empty());

  opts.socket_ifname = "ens5";
  opts.socket_family = "AF_INET6";
  choice = PredictNcclSocketInterfaces(*net, opts);
  EXPECT_FALSE(choice.found()) << "the only IPv6 address on ens5 is link-local";

  opts = {};
  opts.socket_ifname = "=eth1";
  choice = PredictNcclSocketInterfaces(*net, opts);
  EXPECT_FALSE(choice.found());
  ASSERT_EQ(choice.notes.size(), 1u);
  EXPECT_NE(choice.notes[0].find("no socket interface found"), std::string::npos);
}

TEST(Netif, NcclFallsBackToDockerThenLo) {
  NetworkInfo net;
  net.addresses = {{"lo", AddressFamily::kIPv4, "127.0.0.1", 8, false},
                   {"docker0", AddressFamily::kIPv4, "172.17.0.1", 16, false}};
  auto choice = PredictNcclSocketInterfaces(net, {});
  EXPECT_EQ(choice.rule, "docker");
  ASSERT_EQ(choice.selected.size(), 1u);
  EXPECT_EQ(choice.selected[0].ifname, "docker0");
  net.addresses.pop_back();
  choice = PredictNcclSocketInterfaces(net, {});
  EXPECT_EQ(choice.rule, "lo");
  ASSERT_EQ(choice.selected.size(), 1u);
  net.addresses.push_back({"ib0", AddressFamily::kIPv4, "192.168.50.2", 24, false});
  net.addresses.push_back({"eth0", AddressFamily::kIPv4, "10.0.0.2", 24, false});
  choice = PredictNcclSocketInterfaces(net, {});
  EXPECT_EQ(choice.rule, "ib") << "IPoIB interfaces win when NCCL_SOCKET_IFNAME is unset";
  ASSERT_EQ(choice.selected.size(), 1u);
  EXPECT_EQ(choice.selected[0].ifname, "ib0");
}

TEST(Netif, CommIdSubnetHint) {
  NetworkInfo net;
  net.addresses = {{"eth0", AddressFamily::kIPv4, "10.0.0.2", 24, false},
                   {"eth1", AddressFamily::kIPv4, "10.9.0.2", 16, false}};
  NcclSocketOptions opts;
  opts.comm_id = "10.9.3.4:29500";
  auto choice = PredictNcclSocketInterfaces(net, opts);
  ASSERT_EQ(choice.selected.size(), 1u);
  EXPECT_EQ(choice.selected[0].ifname, "eth1");
}

struct MatchCase {
  const char* spec;
  const char* ifname;
  bool match;
};

TEST(Netif, IfnameMatchingTable) {
  const MatchCase cases[] = {
      {"eth", "eth0", true},         {"eth", "eth10", true},        {"eth", "ens5", false},
      {"eth,ens", "ens5", true},     {"=eth0", "eth0", true},       {"=eth0", "eth01", false},
      {"^docker,lo", "lo", false},   {"^docker,lo", "docker0", false}, {"^docker,lo", "eth0", true},
      {"^docker,lo", "lo2", false},  {"^=eth0", "eth0", false},     {"^=eth0", "eth00", true},
      {"ib0:1234", "ib0", true},     {"", "eth0", false},           {"^", "eth0", true},
      {"bond", "bond0", true},       {"en", "enp1s0f0", true},      {"=", "eth0", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(MatchesIfnameSpec(ParseIfnameSpec(c.spec), c.ifname), c.match)
        << "spec '" << c.spec << "' ifname '" << c.ifname << "'";
  }
  auto spec = ParseIfnameSpec("^=a,b:5,,c");
  EXPECT_TRUE(spec.exclude);
  EXPECT_TRUE(spec.exact);
  EXPECT_EQ(spec.names, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Netif, MalformedInputIsRejectedOrSkipped) {
  EXPECT_FALSE(ParseIfaddrsFact("eth0 inet 10.0.0.1\n").ok());
  EXPECT_FALSE(ParseIfaddrsFact("eth0 inet 10.0.0.999 24\n").ok());
  EXPECT_FALSE(ParseIfaddrsFact("eth0 inet 10.0.0.1 40\n").ok());
  EXPECT_TRUE(ParseIfaddrsFact("").ok());
  EXPECT_TRUE(ParseIPv4Routes("garbage\n\x01\x02 zz\n").empty());
  EXPECT_TRUE(ParseIPv6Routes("short line\n").empty());
}

TEST(Netif, LiveProbeOnThisMachine) {
  auto net = ProbeNetwork(*SystemView::Live());
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  const NetInterface* lo = net->Find("lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_TRUE(lo->loopback);
  EXPECT_FALSE(net->addresses.empty());
  auto route = InterfaceForAddress(*net, "127.0.0.1");
  ASSERT_TRUE(route.ok());
  EXPECT_TRUE(route->loopback);
}

}  // namespace
}  // namespace commkit::topology
