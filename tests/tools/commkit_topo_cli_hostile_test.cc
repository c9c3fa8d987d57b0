// commkit-topo with hostile or unusable --from input: exit 2 with a message (never an abort, a hang
// or a file left in TMPDIR), the captured environment used by `advise` on a replay, and an NCCL XML
// export refused when the topology cannot be placed.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace commkit::testing {
namespace {

namespace fs = std::filesystem;

std::string Topo() { return "timeout 30 " + (BinDir() / "commkit-topo").string(); }

TEST(CommkitTopoHostile, SymlinkLoopFifoAndHugeJsonNumberExitTwo) {
  TempDir dir;
  fs::create_symlink("b", dir.path() / "a");
  fs::create_symlink("a", dir.path() / "b");
  auto loop = RunCommand(Topo() + " --from " + (dir.path() / "a").string() + " show 2>&1");
  EXPECT_EQ(loop.exit_code, 2) << loop.output;
  EXPECT_NE(loop.output.find("symbolic links"), std::string::npos) << loop.output;
  ASSERT_EQ(RunCommand("mkfifo " + (dir.path() / "p.xml").string()).exit_code, 0);
  auto fifo = RunCommand(Topo() + " --from " + (dir.path() / "p.xml").string() + " show 2>&1");
  EXPECT_EQ(fifo.exit_code, 2) << fifo.output;
  EXPECT_NE(fifo.output.find("FIFO"), std::string::npos) << fifo.output;
  auto json = dir.Write("t.json", R"({"schema":"commkit.topology","version":1,"nodes":[{"kind":"gpu","gpu":{"index":1e999}}]})");
  auto big = RunCommand(Topo() + " --from " + json.string() + " show 2>&1");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_NE(big.output.find("t.json"), std::string::npos) << big.output;
}

TEST(CommkitTopoHostile, AFailedArchiveReplayLeavesNothingInTmpdir) {
  TempDir dir;
  fs::create_directories(dir.path() / "tmp");
  ASSERT_EQ(RunCommand("cd " + dir.path().string() + " && mkfifo fifo && tar -czf cap.tar.gz fifo").exit_code, 0);
  auto r = RunCommand("TMPDIR=" + (dir.path() / "tmp").string() + " " + Topo() + " --from " +
                      (dir.path() / "cap.tar.gz").string() + " show 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("FIFO"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir.path() / "tmp"));
}

// gpudoctor reports NCCL_SOCKET_IFNAME=eth0 on this capture as a CONFLICT (no eth0 there); advise on
// the same capture must use the environment recorded in it, not the shell's.
TEST(CommkitTopoHostile, AdviseOnACaptureChecksTheCapturedEnvironment) {
  const std::string capture = (TestDataDir() / "gpudoctor" / "host-ifname-eth0-no-eth0").string();
  auto r = RunCommand("env -u NCCL_SOCKET_IFNAME " + Topo() + " --from " + capture + " advise 2>&1");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("NCCL_SOCKET_IFNAME already set by you to 'eth0' (CONFLICT"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("environment recorded in the capture"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("/etc/nccl/topo.xml"), std::string::npos) << "no placeholder path";
  // The shell's own setting does not leak into the replay.
  auto shell = RunCommand("NCCL_SOCKET_IFNAME=lo " + Topo() + " --from " + capture + " advise --format json 2>&1");
  EXPECT_EQ(shell.output.find("\"user_value\": \"lo\""), std::string::npos) << shell.output;
}

TEST(CommkitTopoHostile, NcclXmlExportOfAMatrixSaysWhatCannotBeExported) {
  TempDir dir;
  auto m = dir.Write("m.txt", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\tNV4\t X \t0-7\t0\n");
  auto r = RunCommand(Topo() + " --from " + m.string() + " export --format nccl-xml 2>&1");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.find("<system"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GPU0 (no PCI bus id)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace commkit::testing
