#include "commkit/common/system_view.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace commkit {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A small sysfs-like tree: /sys/class/net/eth0 -> ../../devices/pci0000:00/0000:00:03.0/net/eth0
void MakeTree(const TempDir& dir) {
  dir.Write("sys/devices/pci0000:00/0000:00:03.0/net/eth0/mtu", "9001\n");
  dir.Write("sys/devices/pci0000:00/0000:00:03.0/net/eth0/operstate", "up\n");
  dir.Write("sys/devices/pci0000:00/0000:00:03.0/vendor", "0x1d0f\n");
  fs::create_directories(dir.path() / "sys/class/net");
  fs::create_symlink("../../devices/pci0000:00/0000:00:03.0/net/eth0", dir.path() / "sys/class/net/eth0");
  fs::create_symlink("/sys/devices/pci0000:00/0000:00:03.0", dir.path() / "sys/dev-abs");
}

TEST(SystemView, ReplayResolvesRelativeAndAbsoluteLinksInsideTheRoot) {
  TempDir dir;
  MakeTree(dir);
  auto view = SystemView::Replay(dir.path());
  EXPECT_FALSE(view->live());
  EXPECT_EQ(*view->ReadAttr("/sys/class/net/eth0/mtu"), "9001");
  EXPECT_EQ(*view->RealPath("/sys/class/net/eth0"), "/sys/devices/pci0000:00/0000:00:03.0/net/eth0");
  EXPECT_EQ(*view->ReadAttr("/sys/class/net/eth0/../../vendor"), "0x1d0f");
  EXPECT_EQ(*view->ReadAttr("/sys/dev-abs/vendor"), "0x1d0f") << "absolute link targets are re-rooted";
  EXPECT_EQ(*view->ReadLink("/sys/class/net/eth0"), "../../devices/pci0000:00/0000:00:03.0/net/eth0");
  EXPECT_EQ(*view->ListDir("/sys/class/net"), std::vector<std::string>{"eth0"});
  EXPECT_TRUE(view->IsDirectory("/sys/class/net/eth0"));
  auto missing = view->ReadFile("/sys/class/net/eth9/mtu");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/sys/class/net/eth9/mtu"), std::string::npos);
  EXPECT_FALSE(view->Exists("/nope"));
  EXPECT_EQ(view->ListDir("/nope").status().code(), StatusCode::kNotFound);
}

TEST(SystemView, DotDotCannotEscapeTheRoot) {
  TempDir dir;
  MakeTree(dir);
  dir.Write("secret", "outside");
  auto view = SystemView::Replay(dir.path() / "sys");
  EXPECT_FALSE(view->ReadFile("/../secret").ok());
}

TEST(SystemView, CaptureRecordsExactlyWhatWasReadAndReplaysIt) {
  TempDir machine;
  MakeTree(machine);
  TempDir capture;
  // A "live" view over a fake root stands in for "/" so the test is hermetic.
  SystemView live(machine.path(), /*live=*/true);
  COMMKIT_ASSERT_OK(live.StartCapture(capture.path()));
  EXPECT_EQ(*live.ReadAttr("/sys/class/net/eth0/mtu"), "9001");
  EXPECT_EQ(*live.ListDir("/sys/class/net"), std::vector<std::string>{"eth0"});
  auto fact = live.Fact("nvml.json", [] { return Result<std::string>(std::string("{\"gpus\":0}")); });
  EXPECT_EQ(*fact, "{\"gpus\":0}");
  live.StopCapture();

  auto replay = SystemView::Replay(capture.path());
  EXPECT_EQ(*replay->ReadAttr("/sys/class/net/eth0/mtu"), "9001");
  EXPECT_EQ(*replay->RealPath("/sys/class/net/eth0"), "/sys/devices/pci0000:00/0000:00:03.0/net/eth0");
  EXPECT_EQ(*replay->ListDir("/sys/class/net"), std::vector<std::string>{"eth0"});
  EXPECT_FALSE(replay->ReadFile("/sys/devices/pci0000:00/0000:00:03.0/vendor").ok())
      << "files never read are not captured";
  bool called = false;
  auto replayed = replay->Fact("nvml.json", [&] { called = true; return Result<std::string>(std::string("live")); });
  EXPECT_EQ(*replayed, "{\"gpus\":0}");
  EXPECT_FALSE(called) << "replay never calls the live producer";
  auto absent = replay->Fact("cuda.json", [] { return Result<std::string>(std::string("x")); });
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("fact 'cuda.json' is not in the capture"), std::string::npos);
  EXPECT_EQ(*replay->ListDir("/"), std::vector<std::string>{"sys"}) << ".commkit is hidden from listings";
}

TEST(SystemView, LiveRootReadsThisMachine) {
  auto view = SystemView::Live();
  EXPECT_TRUE(view->live());
  auto self = view->ReadFile("/proc/self/status");
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  EXPECT_NE(self->find("Pid:"), std::string::npos);
}

}  // namespace
}  // namespace commkit
