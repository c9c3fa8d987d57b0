// gpudoctor cluster across four network-namespace hosts on one bridge (label netns, root only):
//   a  10.213.1.1  eth0     healthy; hosts the store (rank 0)
//   b  10.213.1.2  docker0  its only link to the others is named so NCCL would not pick it (NCCL picks
//                           the unconnected eth1 first) -> named, fix NCCL_SOCKET_IFNAME=docker0
//   c  10.213.1.3  eth0     MTU 9000 while everyone else (and the bridge) has 1500 -> named
//   d  10.213.1.4  eth0     inbound TCP connections rejected by iptables -> named in the matrix
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "netns.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

bool Names(const nlohmann::json& finding, int rank) {
  for (const auto& r : finding["ranks"])
    if (r.get<int>() == rank) return true;
  return false;
}

TEST(GpudoctorClusterNetns, NamesEachBadHostAndTheFix) {
  if (std::string why = NetnsUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  if (RunCommand("command -v iptables >/dev/null 2>&1").exit_code != 0)
    GTEST_SKIP() << "iptables is not installed: the firewalled host cannot be built";
  NetnsLab lab;
  std::string err;
  ASSERT_TRUE(lab.AddHost({"a", "eth0", "10.213.1.1/24", 1500, "host-a"}, &err)) << err;
  ASSERT_TRUE(lab.AddHost({"b", "docker0", "10.213.1.2/24", 1500, "host-b"}, &err)) << err;
  ASSERT_TRUE(lab.AddHost({"c", "eth0", "10.213.1.3/24", 9000, "host-c"}, &err)) << err;
  ASSERT_TRUE(lab.AddHost({"d", "eth0", "10.213.1.4/24", 1500, "host-d"}, &err)) << err;
  // b: an up interface NCCL's automatic order prefers over docker*, on a network nobody else is on.
  ASSERT_TRUE(lab.Run("b", "ip link add eth1 type veth peer name eth1p && ip addr add 10.213.2.2/24 dev eth1 && ip link set eth1p up && ip link set eth1 up",
                      &err))
      << err;
  // d: reject every inbound TCP connection (its own outbound connections still work).
  if (!lab.Run("d", "iptables -A INPUT -p tcp --syn -j REJECT --reject-with tcp-reset", &err))
    GTEST_SKIP() << "iptables does not work inside a namespace here: " << err;

  TempDir dir;
  const std::string bin = std::filesystem::absolute(BinDir() / "gpudoctor").string();
  // NCCL_SOCKET_IFNAME must not leak in from the caller's environment.
  const std::string common = " env -u NCCL_SOCKET_IFNAME MASTER_ADDR=10.213.1.1 " + bin +
                             " cluster --store 10.213.1.1:29613 --world 4 --timeout 20 --connect-timeout 2"
                             " --bandwidth-bytes 1000000 --skip kernel,gpu";
  std::string script;
  for (int r = 1; r < 4; ++r) {
    std::string host(1, static_cast<char>('a' + r));
    script += lab.Exec(host) + common + " --rank " + std::to_string(r) + " > " + (dir.path() / host).string() +
              ".out 2>&1 &\n";
  }
  script += lab.Exec("a") + common + " --rank 0 --host-store --json > " + (dir.path() / "report.json").string() +
            " 2> " + (dir.path() / "a.err").string() + "\necho rank0=$?\nwait\n";
  dir.Write("run.sh", script);
  CommandResult run = RunCommand("timeout 60 sh " + (dir.path() / "run.sh").string() + " 2>&1");
  std::ifstream in(dir.path() / "report.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto report = nlohmann::json::parse(text, nullptr, false);
  CommandResult logs = RunCommand("cat " + (dir.path() / "run.sh").string() + " " + (dir.path() / "*.err").string() +
                                  " " + (dir.path() / "*.out").string());
  ASSERT_FALSE(report.is_discarded()) << run.output << "\nreport: " << text << "\nlogs:\n" << logs.output;
  SCOPED_TRACE(report.dump(2));
  EXPECT_NE(run.output.find("rank0=2"), std::string::npos) << run.output;
  EXPECT_EQ(report["exit_code"], 2);
  ASSERT_EQ(report["hosts"].size(), 4u);
  for (const auto& h : report["hosts"]) EXPECT_TRUE(h["arrived"].get<bool>()) << h["rank"];

  bool b_named = false, c_named = false, d_named = false;
  for (const auto& f : report["findings"]) {
    const std::string summary = f["summary"], fix = f["fix"], result = f["result"];
    if (result == "fail" && Names(f, 1) && fix.find("NCCL_SOCKET_IFNAME=docker0") != std::string::npos) b_named = true;
    if (result == "fail" && Names(f, 2) && !Names(f, 0) && summary.find("mtu") != std::string::npos) c_named = true;
    if (result == "fail" && f["ranks"] == nlohmann::json::array({3}) && summary.find("refused") != std::string::npos)
      d_named = true;
    // The healthy host is never blamed alone.
    EXPECT_FALSE(result == "fail" && f["ranks"] == nlohmann::json::array({0})) << summary;
  }
  EXPECT_TRUE(b_named) << "host b (docker0) not named with NCCL_SOCKET_IFNAME=docker0";
  EXPECT_TRUE(c_named) << "host c (MTU 9000) not named";
  EXPECT_TRUE(d_named) << "host d (firewalled) not named as refusing connections";
  // The matrix: every link into d and into b fails; a <-> c works.
  for (const auto& l : report["links"]) {
    int to = l["to"];
    if (to == 1 || to == 3) {
      EXPECT_FALSE(l["ok"].get<bool>()) << l.dump();
    }
    if ((l["from"] == 0 && to == 2) || (l["from"] == 2 && to == 0)) {
      EXPECT_TRUE(l["ok"].get<bool>()) << l.dump();
    }
  }
}

}  // namespace
}  // namespace commkit::testing
