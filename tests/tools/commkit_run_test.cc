// commkit-run end to end: environment, output prefixing, failure propagation, rendezvous.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "test_support.h"

namespace commkit::testing {
namespace {

std::string RunBin() { return (BinDir() / "commkit-run").string(); }
std::string Store() { return (BinDir() / "commkit-store").string(); }

TEST(CommkitRun, FourRanksGetTheStandardEnvironment) {
  auto r = RunCommand(RunBin() + " -n 4 -- sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK "
                              "$MASTER_ADDR ${COMMKIT_STORE_TOKEN:+token} $COMMKIT_LAUNCHER'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    std::string expected = "[" + std::to_string(rank) + "] env " + std::to_string(rank) + " 4 " + std::to_string(rank) +
                           " 4 0 127.0.0.1 token commkit-run";
    EXPECT_NE(r.output.find(expected), std::string::npos) << "missing '" << expected << "' in:\n" << r.output;
  }
}

TEST(CommkitRun, PartialLinesAndStderrArePrefixed) {
  auto r = RunCommand(RunBin() + " -n 2 -- sh -c 'printf \"a\"; sleep 0.1; printf \"b\\nc\"; echo oops >&2'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[0] ab\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1] c\n"), std::string::npos) << "a last line without newline is flushed:\n" << r.output;
  EXPECT_NE(r.output.find("[1] oops"), std::string::npos) << r.output;
  auto plain = RunCommand(RunBin() + " -n 1 --no-prefix -- echo raw");
  EXPECT_EQ(plain.output, "raw\n");
}

TEST(CommkitRun, OneRankExitsThreeOthersAreStopped) {
  auto start = std::chrono::steady_clock::now();
  auto r = RunCommand(RunBin() + " -n 4 --grace 0.5 -- sh -c 'if [ $RANK = 2 ]; then sleep 0.3; exit 3; fi; sleep 60'");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("commkit-run: rank 2 exited with code 3 first; ranks 0,1,3 were stopped"), std::string::npos)
      << r.output;
  EXPECT_LT(took, std::chrono::seconds(30)) << "the others must be stopped, not awaited";
}

TEST(CommkitRun, GracePeriodLetsOthersFinish) {
  // Rank 1 fails; rank 0 finishes on its own within the grace period and is not counted as stopped.
  auto r = RunCommand(RunBin() + " -n 2 --grace 5 -- sh -c 'if [ $RANK = 1 ]; then exit 4; fi; sleep 0.5'");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with code 4 first; no other rank had to be stopped"), std::string::npos)
      << r.output;
}

TEST(CommkitRun, SignalDeathIsReported) {
  auto r = RunCommand(RunBin() + " -n 2 --grace 0.2 -- sh -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("rank 0 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 was stopped"), std::string::npos) << r.output;
}

TEST(CommkitRun, GrandchildrenDieWithTheirRank) {
  auto r = RunCommand(RunBin() + " -n 2 --grace 0.2 --kill-after 0.5 -- sh -c "
                              "'if [ $RANK = 0 ]; then exit 5; fi; sleep 60 & sleep 60'");
  EXPECT_EQ(r.exit_code, 5) << r.output;
}

TEST(CommkitRun, JobTimeout) {
  auto r = RunCommand(RunBin() + " -n 2 --timeout 0.5 --kill-after 0.5 -- sleep 60");
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_NE(r.output.find("job timeout"), std::string::npos) << r.output;
}

TEST(CommkitRun, UsageErrors) {
  EXPECT_EQ(RunCommand(RunBin()).exit_code, 2);
  EXPECT_EQ(RunCommand(RunBin() + " -n 0 -- true").exit_code, 2);
  EXPECT_EQ(RunCommand(RunBin() + " --nnodes 2 --node-rank 2 -- true").exit_code, 2);
  auto missing = RunCommand(RunBin() + " -n 1 -- /nonexistent/program");
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot execute '/nonexistent/program'"), std::string::npos) << missing.output;
  auto help = RunCommand(RunBin() + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Examples:"), std::string::npos);
}

TEST(CommkitRun, RendezvousThroughTheHostedStore) {
  auto r = RunCommand(RunBin() + " -n 4 -- " + Store() + " rendezvous --timeout 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("[" + std::to_string(rank) + "] commkit-run: rank " + std::to_string(rank) + "/4"),
              std::string::npos)
        << r.output;
  EXPECT_NE(r.output.find("all 4 ranks arrived"), std::string::npos);
}

TEST(CommkitRun, RendezvousWithRankZeroHostingTheStore) {
  auto r = RunCommand(RunBin() + " -n 3 --no-store -- " + Store() + " --json rendezvous --timeout 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"world_size\":3"), std::string::npos) << r.output;
}

TEST(CommkitRun, AMissingRankIsNamedByTheOthers) {
  auto r = RunCommand(RunBin() + " -n 3 --grace 10 -- sh -c 'if [ $RANK = 2 ]; then exit 0; fi; exec " + Store() +
                      " rendezvous --timeout 1'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rendezvous: ranks [2] of 3 did not arrive within 1 s"), std::string::npos) << r.output;
}

TEST(CommkitRun, MultiNodeFlagsComputeGlobalRanks) {
  // Two "nodes" on this host: node 0 hosts the store on a fixed port, node 1 joins it.
  TempDir dir;
  auto port_probe = RunCommand("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                               "print(s.getsockname()[1])'");
  ASSERT_EQ(port_probe.exit_code, 0) << port_probe.output;
  std::string port = std::string(port_probe.output.substr(0, port_probe.output.find('\n')));
  std::string common = " --nnodes 2 --master-addr 127.0.0.1 --master-port " + port + " -n 2 -- " + Store() +
                       " rendezvous --timeout 30";
  std::string cmd = "COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 0" + common + " > " + (dir.path() / "n0").string() +
                    " 2>&1 & COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 1" + common + "; rc=$?; wait $! && exit $rc";
  auto r = RunCommand(cmd);
  auto n0 = RunCommand("cat " + (dir.path() / "n0").string());
  ASSERT_EQ(r.exit_code, 0) << r.output << n0.output;
  EXPECT_NE(r.output.find("[3] commkit-run: rank 3/4 (local 1/2, node 1/2)"), std::string::npos) << r.output;
  EXPECT_NE(n0.output.find("[0] commkit-run: rank 0/4 (local 0/2, node 0/2)"), std::string::npos) << n0.output;
}


TEST(CommkitRun, StoppedRanksAreListedInNumericOrderWithTheSignal) {
  auto r = RunCommand(RunBin() + " -n 12 --grace 0.2 -- sh -c 'if [ $RANK = 11 ]; then exit 7; fi; exec sleep 60'");
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_NE(r.output.find("rank 11 exited with code 7 first; ranks 0,1,2,3,4,5,6,7,8,9,10 were stopped (SIGTERM)"),
            std::string::npos)
      << r.output;
}

TEST(CommkitRun, RanksIgnoringSigtermAreKilled) {
  auto r = RunCommand(RunBin() + " -n 2 --grace 0.1 --kill-after 0.3 -- sh -c "
                              "'if [ $RANK = 1 ]; then exit 2; fi; trap \"\" TERM; while :; do sleep 0.05; done'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("rank 0 was stopped (SIGKILL)"), std::string::npos) << r.output;
}

TEST(CommkitRun, SigtermIsForwardedToEveryRank) {
  TempDir dir;
  std::string out = (dir.path() / "out").string();
  // Start the job in the background, wait (bounded) until both ranks are up, then SIGTERM commkit-run.
  std::string cmd = ": > " + out + "; " + RunBin() + " -n 2 -- sh -c 'trap \"echo term $RANK; exit 0\" TERM; echo ready; "
                               "while :; do sleep 0.05; done' > " + out + " 2>&1 & pid=$!; "
                    "i=0; while [ \"$(grep -c ready " + out + ")\" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                    "kill -TERM $pid; wait $pid; rc=$?; cat " + out + "; exit $rc";
  auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 128 + 15) << r.output;
  EXPECT_NE(r.output.find("[0] term 0"), std::string::npos) << "rank 0 must see the forwarded SIGTERM:\n" << r.output;
  EXPECT_NE(r.output.find("[1] term 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("commkit-run: received SIGTERM, forwarded it to every rank"), std::string::npos) << r.output;
}

TEST(CommkitRun, HugeOutputAndOverlongLinesArriveWhole) {
  // 40,000 lines from each of two ranks, and a 3 MB line without a newline: nothing lost, every line prefixed.
  auto r = RunCommand(RunBin() + " -n 2 -- sh -c 'seq 40000; if [ $RANK = 0 ]; then head -c 3000000 /dev/zero | "
                                 "tr \"\\000\" x; fi' | awk '{ if (substr($0,1,4) != \"[0] \" && substr($0,1,4) != "
                                 "\"[1] \") bad++; n[substr($0,1,4)]++; x += gsub(/x/, \"\") } END { print \"bad\", "
                                 "bad+0, (n[\"[0] \"] >= 40001), (n[\"[1] \"] == 40000), x }'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "bad 0 1 1 3000000\n");
}

TEST(CommkitRun, ProgramNotInPathExits127) {
  auto r = RunCommand(RunBin() + " -n 2 -- commkit-no-such-program-xyz");
  EXPECT_EQ(r.exit_code, 127) << r.output;
  EXPECT_NE(r.output.find("commkit-no-such-program-xyz"), std::string::npos) << r.output;
}


TEST(CommkitRun, UnderSrunOrMpirunItExecsTheProgramDirectly) {
  for (const char* outer : {"SLURM_STEP_ID=0 SLURM_PROCID=3", "OMPI_COMM_WORLD_SIZE=2"}) {
    auto r = RunCommand(std::string("env ") + outer + " " + RunBin() +
                        " -n 4 -- sh -c 'echo launcher=${COMMKIT_LAUNCHER:-none} rank=${RANK:-unset}'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "launcher=none rank=unset\n") << outer << ": one process, no prefix, no variables of ours";
  }
  auto spawned = RunCommand(std::string("env SLURM_STEP_ID=0 SLURM_PROCID=3 ") + RunBin() +
                            " --always-spawn -n 2 -- sh -c 'echo rank=$RANK'");
  EXPECT_EQ(spawned.exit_code, 0) << spawned.output;
  EXPECT_NE(spawned.output.find("[1] rank=1"), std::string::npos) << spawned.output;
}


TEST(CommkitRun, MultiNodeWithoutATokenWarns) {
  auto port_probe = RunCommand("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                               "print(s.getsockname()[1])'");
  ASSERT_EQ(port_probe.exit_code, 0) << port_probe.output;
  std::string port = std::string(port_probe.output.substr(0, port_probe.output.find('\n')));
  auto r = RunCommand("env -u COMMKIT_STORE_TOKEN " + RunBin() + " --nnodes 2 --node-rank 0 --master-port " + port +
                      " -n 1 -- sh -c 'echo token=${COMMKIT_STORE_TOKEN:-none}'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("COMMKIT_STORE_TOKEN is not set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] token=none"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace commkit::testing
