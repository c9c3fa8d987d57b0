// Snapshots and captures from elsewhere are untrusted: archives with hostile members, FIFOs and
// symlink loops in a replayed tree, and corrupt facts. Each must give a clear error or an explicit
// "unreadable", never block, escape the extraction directory, leave files behind or read as a PASS.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "commkit/common/archive.h"
#include "commkit/common/fact_schema.h"
#include "commkit/common/system_view.h"
#include "commkit/diagnostics/check.h"
#include "commkit/diagnostics/snapshot.h"
#include "tar_writer.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

namespace fs = std::filesystem;
using testing::TarWriter;

std::size_t Entries(const fs::path& dir) {
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

class SnapshotArchive : public ::testing::Test {
 protected:
  // Extraction directories go under a private TMPDIR, so a leftover is visible.
  void SetUp() override { fs::create_directories(tmp_); }
  Status Open(const TarWriter& tar) {
    const fs::path archive = dir_.path() / "snap.tar.gz";
    tar.WriteGz(archive);
    return SnapshotView::Open(archive).status();
  }
  testing::TempDir dir_;
  fs::path tmp_ = dir_.path() / "tmp";
  testing::ScopedEnv tmpdir_{"TMPDIR", (dir_.path() / "tmp").string()};
};

TEST_F(SnapshotArchive, AGoodArchiveReplaysAndLeavesNothingBehind) {
  TarWriter tar;
  tar.Add("./", '5').Add("./proc/", '5').Add("./proc/cpuinfo", '0', "flags : fpu\n").Add("./.commkit/", '5')
      .Add("./.commkit/facts/", '5').Add("./.commkit/facts/hostname", '0', "node7")
      .Add("./sys/", '5').Add("./sys/class/", '5').Add("./sys/class/net/", '5')
      .Add("./sys/class/net/eth0", '2', "", "../../devices/virtual/net/eth0");
  const fs::path archive = dir_.path() / "snap.tar.gz";
  tar.WriteGz(archive);
  {
    auto snap = SnapshotView::Open(archive);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    EXPECT_EQ(*(*snap)->view()->ReadFile("/proc/cpuinfo"), "flags : fpu\n");
    EXPECT_EQ(*(*snap)->view()->Fact("hostname", [] { return Result<std::string>("live"); }), "node7");
    EXPECT_EQ(*(*snap)->view()->ReadLink("/sys/class/net/eth0"), "../../devices/virtual/net/eth0");
    EXPECT_EQ(Entries(tmp_), 1u);
  }
  EXPECT_EQ(Entries(tmp_), 0u) << "extraction directory removed with the view";
}

TEST_F(SnapshotArchive, HostileMembersAreRefusedAndCleanedUp) {
  struct Case {
    const char* what;
    TarWriter tar;
    const char* expect;
  };
  std::vector<Case> cases;
  cases.push_back({"fifo", TarWriter().Add("./proc/", '5').Add("./proc/cpuinfo", '6'), "FIFO"});
  cases.push_back({"char device", TarWriter().Add("./dev/zero", '3'), "character device"});
  cases.push_back({"hard link", TarWriter().Add("./a", '0', "x").Add("./b", '1', "", "/etc/passwd"), "hard link"});
  cases.push_back({"absolute", TarWriter().Add("/tmp/owned", '0', "x"), "absolute name"});
  cases.push_back({"dotdot", TarWriter().Add("./../../owned", '0', "x"), "climbs out"});
  cases.push_back({"through symlink", TarWriter().Add("./etc", '2', "", "/etc").Add("./etc/owned", '0', "x"), "goes through"});
  cases.push_back({"2 GiB member", TarWriter().AddClaimingSize("./big", 2ull << 30), "allowed per member"});
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto start = std::chrono::steady_clock::now();
    Status s = Open(c.tar);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_EQ(Entries(tmp_), 0u) << "a failed replay leaves no extraction directory";
  }
  EXPECT_FALSE(fs::exists("/tmp/owned"));
  EXPECT_FALSE(fs::exists(dir_.path() / "owned"));
}

TEST_F(SnapshotArchive, TotalSizeIsBoundedWhileReading) {
  TarWriter tar;
  for (int i = 0; i < 4; ++i) tar.Add("./f" + std::to_string(i), '0', std::string(512 * 1024, 'z'));
  const fs::path archive = dir_.path() / "four.tar.gz";
  tar.WriteGz(archive);
  ArchiveLimits limits;
  limits.max_total_bytes = 1 << 20;
  testing::TempDir out;
  Status s = ExtractTarArchive(archive, out.path(), "snapshot", limits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("unpacks to more than"), std::string::npos) << s.ToString();
  limits.max_members = 2;
  limits.max_total_bytes = 64 << 20;
  s = ExtractTarArchive(archive, out.path(), "snapshot", limits);
  EXPECT_NE(s.message().find("more than 2 members"), std::string::npos) << s.ToString();
}

TEST_F(SnapshotArchive, GarbageAndTruncationAreDataLoss) {
  const fs::path junk = dir_.path() / "junk.tar.gz";
  std::ofstream(junk) << "this is not an archive at all, but it is long enough to fill a block? no.";
  EXPECT_FALSE(SnapshotView::Open(junk).ok());
  std::string bytes = TarWriter().Add("./a", '0', std::string(4000, 'a')).Bytes();
  const fs::path cut = dir_.path() / "cut.tar";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, 1500);
  auto s = SnapshotView::Open(cut).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_EQ(Entries(tmp_), 0u);
}

TEST_F(SnapshotArchive, AFifoGivenAsTheSnapshotIsRefusedWithoutBlocking) {
  const fs::path fifo = dir_.path() / "snap.tar.gz";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto s = SnapshotView::Open(fifo).status();
  EXPECT_FALSE(s.ok());
  Status direct = ExtractTarArchive(fifo, dir_.path(), "snapshot");
  EXPECT_NE(direct.message().find("FIFO"), std::string::npos) << direct.ToString();
}

TEST(SnapshotReplay, FifoAndSymlinkLoopInATreeAreErrorsNotHangs) {
  testing::TempDir dir;
  fs::create_directories(dir.path() / "proc");
  ASSERT_EQ(::mkfifo((dir.path() / "proc/cpuinfo").c_str(), 0600), 0);
  fs::create_directories(dir.path() / "sys");
  fs::create_symlink("b", dir.path() / "sys/a");
  fs::create_symlink("a", dir.path() / "sys/b");
  fs::create_directories(dir.path() / ".commkit/facts");
  ASSERT_EQ(::mkfifo((dir.path() / ".commkit/facts/nvml").c_str(), 0600), 0);
  auto view = SystemView::Replay(dir.path());
  auto cpu = view->ReadFile("/proc/cpuinfo");
  EXPECT_EQ(cpu.status().code(), StatusCode::kInvalidArgument) << cpu.status().ToString();
  EXPECT_NE(cpu.status().message().find("FIFO"), std::string::npos);
  EXPECT_FALSE(view->ReadFile("/sys/a").ok());
  EXPECT_FALSE(view->ListDir("/sys/a").ok());
  auto fact = view->Fact("nvml", [] { return Result<std::string>("{}"); });
  EXPECT_FALSE(fact.ok());
  EXPECT_NE(fact.status().message().find("FIFO"), std::string::npos) << fact.status().ToString();
}

TEST(SnapshotFacts, SchemasAcceptWhatProducersWriteAndRejectCorruption) {
  EXPECT_TRUE(ValidateFact("hostname.addresses", "10.0.0.5 fe80::1").ok());
  EXPECT_TRUE(ValidateFact("hostname.addresses", "error: Name or service not known").ok());
  EXPECT_FALSE(ValidateFact("hostname.addresses", "10.0.0.5 \x1b[2Jgarbage").ok());
  EXPECT_TRUE(ValidateFact("rlimit.memlock", "soft=unlimited hard=unlimited").ok());
  EXPECT_FALSE(ValidateFact("rlimit.memlock", "soft=lots hard=unlimited").ok());
  EXPECT_TRUE(ValidateFact("statvfs.dev_shm", "total=67108864 avail=67108864").ok());
  EXPECT_FALSE(ValidateFact("statvfs.dev_shm", "total=-1 avail=1").ok());
  EXPECT_TRUE(ValidateFact("env", "NCCL_DEBUG=INFO\nFI_PROVIDER=efa").ok());
  EXPECT_FALSE(ValidateFact("env", "NCCL_DEBUG=INFO\n\x1b]0;pwned\x07").ok());
  EXPECT_TRUE(ValidateFact("nvml", R"({"available":true,"gpus":[{"index":0,"memory_bytes":85899345920}]})").ok());
  EXPECT_FALSE(ValidateFact("nvml", R"({"gpus":[{"index":1e300}]})").ok()) << "would overflow the int it is read into";
  EXPECT_FALSE(ValidateFact("nvml", "[1,2]").ok());
  EXPECT_FALSE(ValidateFact("dmesg", std::string("a\0b", 3)).ok());
  EXPECT_TRUE(ValidateFact("dmesg", "[ 1.0] anything at all\n").ok());
}

// Today's failure: "127.0.0.1 <junk>" is not all-loopback, so a damaged snapshot turned the
// loopback-only WARN into "resolves to ..." PASS.
TEST(SnapshotFacts, ACorruptFactIsUnreadableAndNeverAPass) {
  testing::TempDir dir;
  dir.Write(".commkit/facts/hostname", "node7");
  dir.Write(".commkit/facts/hostname.addresses", "127.0.1.1");
  Report good = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"net.hostname"}, {}});
  ASSERT_EQ(good.records.size(), 1u);
  EXPECT_EQ(good.records[0].outcome.status, CheckStatus::kWarn) << good.records[0].outcome.summary;

  dir.Write(".commkit/facts/hostname.addresses", "127.0.1.1 \x1b[31m10.0.0.9-junk");
  Report bad = RunChecks(CheckRegistry::BuiltIn(), CheckContext{SystemView::Replay(dir.path())}, {{"net.hostname"}, {}});
  ASSERT_EQ(bad.records.size(), 1u);
  const CheckOutcome& o = bad.records[0].outcome;
  EXPECT_NE(o.status, CheckStatus::kPass);
  EXPECT_NE(o.status, CheckStatus::kSkip);
  EXPECT_NE(o.summary.find("unreadable: snapshot fact 'hostname.addresses'"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("take a new one"), std::string::npos) << o.summary;
}

}  // namespace
}  // namespace commkit::diagnostics
