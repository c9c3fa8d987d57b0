// LastLevelCache over captured sysfs trees: the highest data/unified level wins, instruction caches
// and unreadable entries are skipped, and a tree without cache entries says nothing. CpuVendor over
// captured /proc/cpuinfo files.
#include "commkit/common/cpu_cache.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace commkit {
namespace {

using testing::TempDir;

void Cache(const TempDir& dir, int cpu, int index, const char* type, const char* level, const char* size) {
  const std::string base = "sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
  dir.Write(base + "type", std::string(type) + "\n");
  dir.Write(base + "level", std::string(level) + "\n");
  dir.Write(base + "size", std::string(size) + "\n");
}

TEST(CpuCache, TheHighestDataOrUnifiedLevelWins) {
  TempDir dir;
  Cache(dir, 1, 0, "Data", "1", "32K");
  Cache(dir, 1, 1, "Instruction", "1", "32K");
  Cache(dir, 1, 2, "Unified", "2", "1024K");
  Cache(dir, 1, 3, "Unified", "3", "32768K");
  Cache(dir, 1, 4, "Instruction", "4", "1G");  // never an instruction cache, whatever its level
  auto view = SystemView::Replay(dir.path());
  auto c = LastLevelCache(*view, 1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->level, 3);
  EXPECT_EQ(c->bytes, std::size_t{32} << 20);
  EXPECT_FALSE(LastLevelCache(*view, 0).has_value()) << "no such CPU in the tree";
  EXPECT_FALSE(LastLevelCache(*view, -1).has_value());
}

TEST(CpuCache, SizesInEveryUnitAndBadEntriesSkipped) {
  TempDir dir;
  Cache(dir, 0, 0, "Data", "1", "48K");
  Cache(dir, 0, 2, "Unified", "2", "2M");
  Cache(dir, 0, 3, "Unified", "3", "garbage");    // unreadable size: skipped, not a crash
  Cache(dir, 0, 5, "Unified", "99", "1M");         // nonsense level: skipped
  auto view = SystemView::Replay(dir.path());
  auto c = LastLevelCache(*view, 0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->level, 2);
  EXPECT_EQ(c->bytes, std::size_t{2} << 20);

  TempDir bytes_only;
  Cache(bytes_only, 0, 0, "Unified", "2", "524288");
  EXPECT_EQ(LastLevelCache(*SystemView::Replay(bytes_only.path()), 0)->bytes, std::size_t{512} << 10);
}

TEST(CpuCache, VendorIsTheFirstVendorIdLine) {
  TempDir intel;
  intel.Write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\n"
                              "processor\t: 1\nvendor_id\t: AuthenticAMD\n");
  EXPECT_EQ(CpuVendor(*SystemView::Replay(intel.path())), "GenuineIntel");
  TempDir arm;  // aarch64 prints no vendor_id line
  arm.Write("proc/cpuinfo", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n");
  EXPECT_EQ(CpuVendor(*SystemView::Replay(arm.path())), "");
  TempDir none;
  EXPECT_EQ(CpuVendor(*SystemView::Replay(none.path())), "");
}

}  // namespace
}  // namespace commkit
