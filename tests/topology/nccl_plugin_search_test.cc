// The probe finds NCCL's net plugin with the loader search gpudoctor uses (nccl_libraries.h), so the
// advisor and gpudoctor agree on whether NCCL would load an installed plugin. Replayed trees only.
#include <gtest/gtest.h>

#include <string>

#include "commkit/topology/advisor.h"
#include "commkit/topology/nccl_libraries.h"
#include "commkit/topology/probe.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

using commkit::testing::TempDir;

ProbeOptions RdmaOnly() {
  ProbeOptions o;
  o.pci = o.network = o.nvml = o.cuda = o.verbs = o.libfabric = o.hwloc = false;
  o.rdma = true;
  return o;
}

TEST(NcclPluginSearch, PluginOnTheLoaderPathIsTheOneNcclLoads) {
  TempDir dir;
  dir.Write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  dir.Write("etc/ld.so.conf.d/efa.conf", "/opt/amazon/ofi-nccl/lib\n");
  dir.Write("opt/amazon/ofi-nccl/lib/libnccl-net.so", "");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), RdmaOnly());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->system.ofi_nccl_plugin, "/opt/amazon/ofi-nccl/lib/libnccl-net.so");
  EXPECT_TRUE(rep->system.ofi_nccl_plugin_loadable);
}

TEST(NcclPluginSearch, InstalledOffTheLoaderPathIsReportedAsNotLoaded) {
  TempDir dir;
  dir.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), RdmaOnly());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->system.ofi_nccl_plugin, "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  EXPECT_FALSE(rep->system.ofi_nccl_plugin_loadable);
}

TEST(NcclPluginSearch, CapturedEnvironmentNamesThePlugin) {
  // NCCL_NET_PLUGIN=ofi makes NCCL dlopen libnccl-net-ofi.so; LD_LIBRARY_PATH puts its dir on the path.
  TempDir dir;
  dir.Write(".commkit/facts/env", "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib\nNCCL_NET_PLUGIN=ofi\n");
  dir.Write("opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "");
  const auto view = SystemView::Replay(dir.path());
  EXPECT_EQ(NodeEnvironment(*view).at("NCCL_NET_PLUGIN"), "ofi");
  auto rep = ProbeTopology(*view, RdmaOnly());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->system.ofi_nccl_plugin, "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  EXPECT_TRUE(rep->system.ofi_nccl_plugin_loadable);
}

TEST(NcclPluginSearch, NothingInstalled) {
  TempDir dir;
  dir.Write("etc/hostname", "bare\n");
  auto rep = ProbeTopology(*SystemView::Replay(dir.path()), RdmaOnly());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->system.ofi_nccl_plugin.empty());
  EXPECT_FALSE(rep->system.ofi_nccl_plugin_loadable);
  EXPECT_TRUE(NodeEnvironment(*SystemView::Replay(dir.path())).empty());
}

}  // namespace
}  // namespace commkit::topology
