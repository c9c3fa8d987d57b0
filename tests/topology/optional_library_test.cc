// libibverbs, libfabric and libhwloc are loaded at run time: with one made unavailable (its
// COMMKIT_LIB* override pointing at a file that does not exist, or at a library without its
// symbols), the prober says what is missing and what to install, and the rest of the probe runs.
#include <gtest/gtest.h>

#include <string>

#include "commkit/common/config.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/libfabric.h"
#include "commkit/topology/probe.h"
#include "commkit/topology/verbs.h"
#include "test_support.h"

namespace commkit::topology {
namespace {

using commkit::testing::ScopedEnv;
using commkit::testing::TempDir;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(OptionalLibrary, MissingLibibverbsSaysWhatToInstall) {
  if (!COMMKIT_HAVE_IBVERBS) GTEST_SKIP() << "built without libibverbs headers";
  TempDir dir;
  const std::string absent = (dir.path() / "libibverbs.so.1").string();
  ScopedEnv env("COMMKIT_LIBIBVERBS", absent);
  auto r = ParseVerbsFact(VerbsFact());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->available);
  EXPECT_TRUE(r->devices.empty());
  // Who, what (dlerror's text), what to do.
  EXPECT_TRUE(Has(r->error, "libibverbs.so.1 not available")) << r->error;
  EXPECT_TRUE(Has(r->error, absent + ": cannot open shared object file")) << r->error;
  EXPECT_TRUE(Has(r->error, "install rdma-core / ibverbs-providers to probe RDMA devices")) << r->error;
}

TEST(OptionalLibrary, LibraryWithoutTheSymbolsIsNamedAsTooOld) {
  if (!COMMKIT_HAVE_LIBFABRIC) GTEST_SKIP() << "built without libfabric headers";
  ScopedEnv env("COMMKIT_LIBFABRIC", "libc.so.6");  // loads, but has no fi_* entry points
  auto r = ParseLibfabricFact(LibfabricFact("efa"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->available);
  EXPECT_EQ(r->provider, "efa");
  EXPECT_TRUE(Has(r->error, "libfabric.so.1 not available")) << r->error;
  EXPECT_TRUE(Has(r->error, "has no symbol fi_")) << r->error;
  EXPECT_TRUE(Has(r->error, "install libfabric")) << r->error;
}

TEST(OptionalLibrary, MissingLibhwlocSkipsHwlocOnly) {
  if (!COMMKIT_HAVE_HWLOC) GTEST_SKIP() << "built without hwloc headers";
  TempDir dir;
  ScopedEnv env("COMMKIT_LIBHWLOC", (dir.path() / "libhwloc.so.15").string());
  HwlocSnapshot s = HwlocSnapshotLive();
  EXPECT_FALSE(s.available);
  EXPECT_TRUE(s.xml.empty());
  EXPECT_TRUE(Has(s.error, "libhwloc.so.15 not available")) << s.error;
  EXPECT_TRUE(Has(s.error, "install hwloc")) << s.error;
}

// The whole live probe with all three libraries unavailable: it completes, the three probers are
// skipped with the message (not failed), and every other prober ends as it does with them.
TEST(OptionalLibrary, LiveProbeCompletesWithoutTheLibraries) {
  auto with = ProbeTopology(*SystemView::Live());
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  TempDir dir;
  ScopedEnv verbs("COMMKIT_LIBIBVERBS", (dir.path() / "libibverbs.so.1").string());
  ScopedEnv fabric("COMMKIT_LIBFABRIC", (dir.path() / "libfabric.so.1").string());
  ScopedEnv hwloc("COMMKIT_LIBHWLOC", (dir.path() / "libhwloc.so.15").string());
  auto without = ProbeTopology(*SystemView::Live());
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  struct Expect {
    const char* prober;
    bool built;
    const char* message;
  };
  for (const Expect& e : {Expect{"verbs", COMMKIT_HAVE_IBVERBS != 0, "libibverbs.so.1 not available"},
                          Expect{"libfabric", COMMKIT_HAVE_LIBFABRIC != 0, "libfabric.so.1 not available"},
                          Expect{"hwloc", COMMKIT_HAVE_HWLOC != 0, "libhwloc.so.15 not available"}}) {
    const ProberStatus* p = without->Prober(e.prober);
    ASSERT_NE(p, nullptr) << e.prober;
    EXPECT_EQ(p->state, ProberState::kSkipped) << e.prober << ": " << p->detail;
    if (e.built) {
      EXPECT_TRUE(Has(p->detail, e.message)) << e.prober << ": " << p->detail;
    }
  }
  for (const char* other : {"nvml", "cuda", "pci", "network", "rdma"}) {
    const ProberStatus* a = with->Prober(other);
    const ProberStatus* b = without->Prober(other);
    ASSERT_NE(a, nullptr) << other;
    ASSERT_NE(b, nullptr) << other;
    EXPECT_EQ(a->state, b->state) << other << ": " << a->detail << " / " << b->detail;
  }
  EXPECT_EQ(with->topology.GpuCount(), without->topology.GpuCount());
  EXPECT_TRUE(without->topology.Validate().ok());
}

}  // namespace
}  // namespace commkit::topology
