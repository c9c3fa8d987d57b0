// gpudoctor --from with hostile snapshots, end to end: escape bytes in the data never reach the
// terminal (with NO_COLOR too), a FIFO named as a log or snapshot is refused at once, a failed
// archive replay leaves nothing in TMPDIR.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "tar_writer.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

namespace fs = std::filesystem;

std::string Doctor() { return (BinDir() / "gpudoctor").string(); }

TEST(GpudoctorSnapshotCli, EscapeBytesFromASnapshotAreEscapedUnderNoColor) {
  TempDir dir;
  // An Xid line whose device field (quoted in the evidence) carries terminal escapes: clear screen, set title.
  dir.Write("var/log/kern.log", "[ 1.0] NVRM: Xid (PCI:0000:01:00\x1b[2J\x1b]0;owned\x07): 79, pid=1, GPU has fallen off the bus.\n");
  for (const char* mode : {"", " --json"}) {
    SCOPED_TRACE(mode);
    auto r = RunCommand("NO_COLOR=1 " + Doctor() + mode + " --from " + dir.path().string() + " --only kernel.xid");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\x07'), std::string::npos) << r.output;
  }
  auto text = RunCommand("NO_COLOR=1 " + Doctor() + " --from " + dir.path().string() + " --only kernel.xid");
  EXPECT_NE(text.output.find("\\x1b[2J"), std::string::npos) << "shown, escaped: " << text.output;
}

TEST(GpudoctorSnapshotCli, FifosAreRefusedNotWaitedOn) {
  TempDir dir;
  const fs::path fifo = dir.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // `timeout` turns a hang into exit 124 instead of a stuck test.
  auto log = RunCommand("timeout 20 " + Doctor() + " explain " + fifo.string() + " 2>&1");
  EXPECT_EQ(log.exit_code, 3) << log.output;
  EXPECT_NE(log.output.find("FIFO"), std::string::npos) << log.output;
  auto snap = RunCommand("timeout 20 " + Doctor() + " --from " + fifo.string() + " 2>&1");
  EXPECT_EQ(snap.exit_code, 3) << snap.output;
}

TEST(GpudoctorSnapshotCli, AFailedArchiveReplayLeavesNoTemporaryDirectory) {
  TempDir dir;
  fs::create_directories(dir.path() / "tmp");
  const fs::path archive = dir.path() / "bad.tar.gz";
  TarWriter().Add("./proc/", '5').Add("./proc/cpuinfo", '6').WriteGz(archive);
  auto r = RunCommand("TMPDIR=" + (dir.path() / "tmp").string() + " timeout 20 " + Doctor() + " --from " + archive.string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("FIFO"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir.path() / "tmp"));
}

}  // namespace
}  // namespace commkit::testing
