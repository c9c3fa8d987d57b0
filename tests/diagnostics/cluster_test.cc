// gpudoctor cluster mode in one process: ranks are threads sharing a HashStore, probing over loopback;
// and the version/plugin facts from small replayed machine trees written here.
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "commkit/comm/hash_store.h"
#include "commkit/diagnostics/cluster.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

using namespace std::chrono_literals;

ClusterOptions Options(int rank, int world) {
  ClusterOptions o;
  o.rank = rank;
  o.world = world;
  o.timeout = 10s;
  o.connect_timeout = 2s;
  o.bandwidth_bytes = 1 << 20;
  o.listen_address = "127.0.0.1";
  o.selection.only = {"shm"};  // keep the node part small
  return o;
}

TEST(Cluster, ThreeRanksOverLoopbackConnectEveryPair) {
  HashStore store;
  CheckRegistry registry = CheckRegistry::BuiltIn();
  CheckContext context{SystemView::Live()};
  std::vector<Result<std::optional<ClusterReport>>> results(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { results[r] = RunCluster(store, registry, context, Options(r, 3)); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
  EXPECT_FALSE(results[1]->has_value());
  EXPECT_FALSE(results[2]->has_value());
  ASSERT_TRUE(results[0]->has_value());
  const ClusterReport& rep = **results[0];
  ASSERT_EQ(rep.hosts.size(), 3u);
  ASSERT_EQ(rep.links.size(), 6u);
  for (const ClusterLink& l : rep.links) {
    EXPECT_TRUE(l.ok) << l.from << "->" << l.to << ": " << l.error;
    EXPECT_GT(l.mbytes_per_s, 0) << l.from << "->" << l.to;
  }
  EXPECT_TRUE(rep.diff.empty());  // same process: same facts
  auto json = nlohmann::json::parse(rep.ToJson());
  EXPECT_EQ(json["schema"], "commkit.gpudoctor.cluster/1");
  EXPECT_EQ(json["links"].size(), 6u);
  EXPECT_NE(rep.ToText(false).find("TCP connectivity"), std::string::npos);
}

TEST(Cluster, MissingRankIsNamedNotWaitedOnForever) {
  HashStore store;
  CheckRegistry registry = CheckRegistry::BuiltIn();
  CheckContext context{SystemView::Live()};
  ClusterOptions o0 = Options(0, 3), o1 = Options(1, 3);
  o0.timeout = o1.timeout = 1s;
  Result<std::optional<ClusterReport>> r1 = Status::Internal("not run");
  std::thread t([&] { r1 = RunCluster(store, registry, context, o1); });
  auto start = std::chrono::steady_clock::now();
  auto r0 = RunCluster(store, registry, context, o0);
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // bounded (two 1 s waits plus probes)
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r0->has_value());
  const ClusterReport& rep = **r0;
  EXPECT_FALSE(rep.hosts[2].arrived);
  EXPECT_EQ(rep.ExitCode(), 2);
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_NE(rep.findings.front().summary.find("ranks [2] of 3 never reported"), std::string::npos)
      << rep.findings.front().summary;
  for (const ClusterLink& l : rep.links) EXPECT_NE(l.to, 2);
}

TEST(Cluster, RefusedPeerAndMtuMismatchAndSlowHostAreNamed) {
  std::vector<ClusterHost> hosts(4);
  for (int r = 0; r < 4; ++r) {
    hosts[r].rank = r;
    hosts[r].arrived = true;
    hosts[r].host = "n" + std::to_string(r);
    hosts[r].iface = "eth0";
    hosts[r].listen = "10.0.0." + std::to_string(r) + ":1";
    hosts[r].facts = {{"net.nccl_iface", "eth0"}, {"net.nccl_iface.mtu", r == 2 ? "9000" : "1500"}};
  }
  std::vector<ClusterLink> links;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      if (b == 3) links.push_back({a, b, false, "refused (x) connecting to 10.0.0.3:1", 0});
      else links.push_back({a, b, true, "", (a == 1 || b == 1) ? 100.0 : 1000.0});
    }
  ClusterReport rep = BuildClusterReport(hosts, links);
  EXPECT_EQ(rep.ExitCode(), 2);
  bool refused = false, mtu = false, slow = false;
  for (const ClusterFinding& f : rep.findings) {
    if (f.ranks == std::vector<int>{3} && f.summary.find("refused") != std::string::npos) refused = true;
    if (f.ranks == std::vector<int>{2} && f.fix.find("mtu 1500") != std::string::npos) mtu = true;
    if (f.ranks == std::vector<int>{1} && f.summary.find("slow host") != std::string::npos) slow = true;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(mtu);
  EXPECT_TRUE(slow);
  EXPECT_EQ(rep.diff.count("net.nccl_iface.mtu"), 1u);
}


// Host names, interfaces, facts, link errors and check messages come from other ranks: the text
// report shows their control bytes (terminal escapes, CR, BEL, C1) as visible escapes; JSON keeps the
// strings as data with the writer's escapes and replaces bytes that are not UTF-8.
TEST(ClusterReport, OtherRanksStringsCannotDriveTheTerminal) {
  const std::string evil_host = "n1\x1b]0;owned\x07\x1b[2J";
  std::vector<ClusterHost> hosts(2);
  for (int r = 0; r < 2; ++r) {
    hosts[r].rank = r;
    hosts[r].arrived = true;
    hosts[r].host = r == 0 ? "n0" : evil_host;
    hosts[r].iface = r == 0 ? "eth0" : "eth\r0";
    hosts[r].listen = "10.0.0." + std::to_string(r) + ":1";
    hosts[r].facts = {{"net.nccl_iface.mtu", r == 0 ? "1500" : "1500\x1b[31m"}, {"env\x1b[1m", "x"}};
  }
  CheckRecord rec;
  rec.info.id = "shm";
  rec.outcome.status = CheckStatus::kFail;
  rec.outcome.summary = "disk \x1b[32mfull\x9b\xff";  // C1 CSI and a byte that is not UTF-8
  rec.outcome.fix = "run\x1b[8m hidden";
  hosts[1].report.records.push_back(rec);
  std::vector<ClusterLink> links = {{0, 1, false, "refused\x1b[0m\x07", 0}, {1, 0, true, "", 0}};
  ClusterReport rep = BuildClusterReport(hosts, links);

  std::string text = rep.ToText(/*color=*/false);
  for (unsigned char ch : text) EXPECT_TRUE(ch == '\n' || (ch >= 0x20 && ch != 0x7f && ch != 0x9b && ch != 0xff)) << int(ch) << "\n" << text;
  EXPECT_NE(text.find("n1\\x1b]0;owned\\x07\\x1b[2J"), std::string::npos) << text;
  EXPECT_NE(text.find("eth\\x0d0"), std::string::npos) << text;
  EXPECT_NE(text.find("refused\\x1b[0m"), std::string::npos) << text;
  EXPECT_NE(text.find("1500\\x1b[31m"), std::string::npos) << text;
  EXPECT_NE(text.find("disk \\x1b[32mfull"), std::string::npos) << text;

  std::string js;
  ASSERT_NO_THROW(js = rep.ToJson());
  for (unsigned char ch : js) EXPECT_TRUE(ch == '\n' || ch >= 0x20) << int(ch);
  EXPECT_NE(js.find("\\u001b"), std::string::npos);
  auto doc = nlohmann::json::parse(js);
  EXPECT_EQ(doc["hosts"][1]["host"], evil_host) << "JSON keeps the string as data";
  EXPECT_EQ(doc["hosts"][1]["facts"]["net.nccl_iface.mtu"], "1500\x1b[31m");
  std::string summary = doc["hosts"][1]["report"]["checks"][0]["summary"];
  EXPECT_EQ(summary.find('\xff'), std::string::npos) << "not UTF-8: written escaped";
}

// Another rank's entry with fields of the wrong type (a bug or a hostile client of the store) is
// counted as not arrived; rank 0 still writes its report.
TEST(Cluster, MalformedEntriesOfOtherRanksAreNotFatal) {
  HashStore store;
  ASSERT_TRUE(store.Set("gpudoctor/default/node/1", R"({"host": 7, "facts": {"a": [1]}, "report": {"checks": 3}})").ok());
  ASSERT_TRUE(store.Set("gpudoctor/default/node/2", R"({"host": "n2", "report": {"checks": [{"summary": 1}]}})").ok());
  ASSERT_TRUE(store.Set("gpudoctor/default/links/1", R"([{"from": "x", "to": 0}, {"from": 99, "to": -5, "ok": true}])").ok());
  ASSERT_TRUE(store.Set("gpudoctor/default/links/2", R"({"not": "a list"})").ok());
  CheckRegistry registry = CheckRegistry::BuiltIn();
  auto o = Options(0, 3);
  o.bandwidth_bytes = 0;
  auto result = RunCluster(store, registry, CheckContext{SystemView::Live()}, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(result->has_value());
  const ClusterReport& rep = **result;
  ASSERT_EQ(rep.hosts.size(), 3u);
  EXPECT_TRUE(rep.hosts[0].arrived);
  EXPECT_FALSE(rep.hosts[1].arrived);
  EXPECT_FALSE(rep.hosts[2].arrived);
  for (const ClusterLink& l : rep.links) EXPECT_TRUE(l.from >= 0 && l.from < 3 && l.to >= 0 && l.to < 3);
  EXPECT_NO_THROW((void)rep.ToText(false));
  EXPECT_NO_THROW((void)rep.ToJson());
}

// --- cuda.driver_version, nccl.version, nccl.net_plugins from replayed trees ---------------------

namespace fs = std::filesystem;
using commkit::testing::TempDir;

struct FakeHost {
  std::string nccl = "2.21.5";       // libnccl.so.<nccl> in /usr/lib/x86_64-linux-gnu ("" = none)
  bool plugin_installed = true;      // aws-ofi-nccl in /opt/amazon/ofi-nccl/lib
  bool plugin_on_ld_path = true;     // ... and LD_LIBRARY_PATH names that dir
  int cuda = 12040;                  // NVML's CUDA driver version (0 = no NVML)
  std::string extra_env;             // more "NAME=value" lines for the env fact
};

// A machine tree as SystemView::Replay reads it: files, symbolic links, and the facts the live view
// would have recorded (env, nvml).
void WriteHost(const TempDir& d, const FakeHost& h) {
  std::string env = "NCCL_DEBUG=WARN\n" + h.extra_env;
  if (h.plugin_on_ld_path) env += "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64\n";
  d.Write(".commkit/facts/env", env);
  d.Write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  d.Write("etc/ld.so.conf.d/x86_64-linux-gnu.conf", "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n");
  if (!h.nccl.empty()) {
    d.Write("usr/lib/x86_64-linux-gnu/libnccl.so." + h.nccl, "ELF");
    fs::create_symlink("libnccl.so." + h.nccl, d.path() / "usr/lib/x86_64-linux-gnu/libnccl.so.2");
  }
  if (h.plugin_installed) {
    d.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "ELF");
    fs::create_symlink("libnccl-net-ofi.so", d.path() / "opt/amazon/ofi-nccl/lib/libnccl-net.so");
  }
  if (h.cuda > 0)
    d.Write(".commkit/facts/nvml", nlohmann::json{{"available", true}, {"driver_version", "550.54.15"},
                                                  {"cuda_driver_version", h.cuda}, {"gpus", nlohmann::json::array()}}.dump());
  d.Write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n");
}

std::map<std::string, std::string> FactsOf(const FakeHost& h) {
  TempDir d;
  WriteHost(d, h);
  return CollectClusterFacts(CheckContext{SystemView::Replay(d.path())}, nullptr, nullptr);
}

TEST(ClusterFacts, VersionsAndTheNetPluginNcclWouldLoad) {
  auto facts = FactsOf({});
  EXPECT_EQ(facts["nccl.version"], "2.21.5");  // libnccl.so.2 -> libnccl.so.2.21.5 is one library
  EXPECT_EQ(facts["nccl.net_plugins"], "/opt/amazon/ofi-nccl/lib/libnccl-net.so -> libnccl-net-ofi.so");
  EXPECT_EQ(facts["cuda.driver_version"], "12.4");
  EXPECT_EQ(facts["nvidia.driver"].find("NVRM version"), 0u);
  EXPECT_EQ(facts["env.NCCL_DEBUG"], "WARN");  // from the env fact, not this process's environment
  EXPECT_EQ(facts.count("env.LD_LIBRARY_PATH"), 0u);

  // Installed but off the loader path: NCCL loads nothing; the fact says where the plugin is.
  facts = FactsOf({.plugin_on_ld_path = false});
  EXPECT_EQ(facts["nccl.net_plugins"],
            "none; not loaded: /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so, /opt/amazon/ofi-nccl/lib/libnccl-net.so");
  // Not installed, no NVML, no NCCL: no version facts, the plugin fact still says "none".
  facts = FactsOf({.nccl = "", .plugin_installed = false, .cuda = 0});
  EXPECT_EQ(facts["nccl.net_plugins"], "none");
  EXPECT_EQ(facts.count("nccl.version"), 0u);
  EXPECT_EQ(facts.count("cuda.driver_version"), 0u);
}

TEST(ClusterFacts, NcclNetPluginFollowsNcclsLoaderRules) {
  // A bare name: NCCL dlopen()s "ofi" then "libnccl-net-ofi.so" on the loader path.
  auto facts = FactsOf({.extra_env = "NCCL_NET_PLUGIN=ofi\n"});
  EXPECT_EQ(facts["nccl.net_plugins"], "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  // A path is opened as given, on or off the loader path.
  facts = FactsOf({.plugin_on_ld_path = false, .extra_env = "NCCL_NET_PLUGIN=/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so\n"});
  EXPECT_EQ(facts["nccl.net_plugins"], "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  // A name that is not there, and "none".
  facts = FactsOf({.extra_env = "NCCL_NET_PLUGIN=gib\n"});
  EXPECT_EQ(facts["nccl.net_plugins"].rfind("none (NCCL_NET_PLUGIN=gib: tried gib, libnccl-net-gib.so)", 0), 0u)
      << facts["nccl.net_plugins"];
  facts = FactsOf({.extra_env = "NCCL_NET_PLUGIN=none\n"});
  EXPECT_EQ(facts["nccl.net_plugins"].rfind("none (NCCL_NET_PLUGIN=none)", 0), 0u) << facts["nccl.net_plugins"];
  // A list: the first entry found is what NCCL tries first.
  facts = FactsOf({.extra_env = "NCCL_NET_PLUGIN=gib,ofi\n"});
  EXPECT_EQ(facts["nccl.net_plugins"], "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
}

TEST(ClusterFacts, UnversionedNcclTakesTheHeaderVersionAndTwoLibrariesAreBothNamed) {
  TempDir d;
  WriteHost(d, {});
  // PyTorch's nvidia-nccl-cu12 wheel: libnccl.so.2 only, the version in the nccl.h beside it.
  const std::string wheel = "usr/local/lib/python3.11/dist-packages/nvidia/nccl/";
  d.Write(wheel + "lib/libnccl.so.2", "ELF");
  d.Write(wheel + "include/nccl.h", "#define NCCL_VERSION_CODE 22304\n");
  auto facts = CollectClusterFacts(CheckContext{SystemView::Replay(d.path())}, nullptr, nullptr);
  EXPECT_EQ(facts["nccl.version"], "2.21.5, 2.23.4");
}

std::vector<ClusterHost> HostsFrom(const std::vector<FakeHost>& fakes) {
  std::vector<ClusterHost> hosts(fakes.size());
  for (std::size_t r = 0; r < fakes.size(); ++r) {
    hosts[r].rank = static_cast<int>(r);
    hosts[r].arrived = true;
    hosts[r].host = "n" + std::to_string(r);
    hosts[r].facts = FactsOf(fakes[r]);
  }
  return hosts;
}

const ClusterFinding* FindingFor(const ClusterReport& rep, const std::string& fact, std::vector<int> ranks) {
  for (const ClusterFinding& f : rep.findings)
    if (f.ranks == ranks && f.summary.find(": " + fact + " = ") != std::string::npos) return &f;
  return nullptr;
}

TEST(ClusterFacts, DiffNamesTheHostWithoutThePluginAndTheOtherNcclVersion) {
  // n1: aws-ofi-nccl installed but not on LD_LIBRARY_PATH; n2: NCCL 2.18.1; n3: older driver;
  // n4: no plugin at all.
  ClusterReport rep = BuildClusterReport(
      HostsFrom({{}, {.plugin_on_ld_path = false}, {.nccl = "2.18.1"}, {.cuda = 12020}, {.plugin_installed = false}}), {});
  EXPECT_EQ(rep.ExitCode(), 2);
  ASSERT_EQ(rep.diff.count("nccl.net_plugins"), 1u);
  EXPECT_EQ(rep.diff["nccl.net_plugins"]["/opt/amazon/ofi-nccl/lib/libnccl-net.so -> libnccl-net-ofi.so"], (std::vector<int>{0, 2, 3}));

  const ClusterFinding* off_path = FindingFor(rep, "nccl.net_plugins", {1});
  ASSERT_NE(off_path, nullptr) << rep.ToText(false);
  EXPECT_EQ(off_path->status, CheckStatus::kFail);
  EXPECT_EQ(off_path->summary.rfind("n1 (rank 1): nccl.net_plugins = 'none; not loaded:", 0), 0u) << off_path->summary;
  EXPECT_EQ(off_path->fix.rfind("export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:$LD_LIBRARY_PATH   # on n1 (rank 1)", 0), 0u)
      << off_path->fix;

  const ClusterFinding* missing = FindingFor(rep, "nccl.net_plugins", {4});
  ASSERT_NE(missing, nullptr) << rep.ToText(false);
  EXPECT_EQ(missing->status, CheckStatus::kFail);
  EXPECT_EQ(missing->fix, "install aws-ofi-nccl (the AWS EFA installer puts it in /opt/amazon/ofi-nccl) on n4 (rank 4), "
                          "then export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:$LD_LIBRARY_PATH");

  const ClusterFinding* nccl = FindingFor(rep, "nccl.version", {2});
  ASSERT_NE(nccl, nullptr) << rep.ToText(false);
  EXPECT_EQ(nccl->status, CheckStatus::kFail);
  EXPECT_NE(nccl->summary.find("'2.18.1' but 4 of 5 hosts have '2.21.5'"), std::string::npos) << nccl->summary;
  EXPECT_EQ(nccl->fix, "install NCCL 2.21.5 on n2 (rank 2) so every host runs one version; check with NCCL_DEBUG=VERSION on every rank");

  const ClusterFinding* cuda = FindingFor(rep, "cuda.driver_version", {3});
  ASSERT_NE(cuda, nullptr) << rep.ToText(false);
  EXPECT_EQ(cuda->status, CheckStatus::kWarn);
  EXPECT_NE(cuda->summary.find("'12.2' but 4 of 5 hosts have '12.4'"), std::string::npos) << cuda->summary;
  EXPECT_EQ(cuda->fix, "install the NVIDIA driver the other hosts run (550.54.15, CUDA 12.4) on n3 (rank 3), then reboot "
                      "(or reload the nvidia modules)");

  // Only the hosts named: nobody else is blamed for these three facts.
  for (const ClusterFinding& f : rep.findings) {
    for (const char* fact : {"nccl.net_plugins", "nccl.version", "cuda.driver_version"}) {
      if (f.summary.find(std::string(": ") + fact + " = ") == std::string::npos) continue;
      EXPECT_TRUE(f.ranks == std::vector<int>{1} || f.ranks == std::vector<int>{2} || f.ranks == std::vector<int>{3} ||
                  f.ranks == std::vector<int>{4})
          << f.summary;
    }
  }
}

TEST(ClusterFacts, OnlyHostLoadingAPluginFailsToo) {
  ClusterReport rep = BuildClusterReport(HostsFrom({{.plugin_installed = false}, {.plugin_installed = false}, {}}), {});
  const ClusterFinding* f = FindingFor(rep, "nccl.net_plugins", {2});
  ASSERT_NE(f, nullptr) << rep.ToText(false);
  EXPECT_EQ(f->status, CheckStatus::kFail);
  EXPECT_NE(f->fix.find("export NCCL_NET_PLUGIN=none on n2 (rank 2)"), std::string::npos) << f->fix;
}

}  // namespace
}  // namespace commkit::diagnostics
