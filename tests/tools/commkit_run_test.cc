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
                      " --exit-barrier-timeout 0.5 -n 1 -- sh -c 'echo token=${COMMKIT_STORE_TOKEN:-none}'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("COMMKIT_STORE_TOKEN is not set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] token=none"), std::string::npos) << r.output;
}


// Was "rank 0 exited with code 1 first": the survivor that noticed its peer was gone got the blame.
TEST(CommkitRun, ARankThatExitsZeroEarlyIsTheCulprit) {
  auto r = RunCommand(RunBin() + " -n 4 --grace 0.2 -- sh -c 'if [ $RANK = 2 ]; then exit 0; fi; "
                                 "if [ $RANK = 0 ]; then sleep 0.5; exit 1; fi; exec sleep 60'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("commkit-run: rank 2 exited with code 0 first"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("then rank 0 exited with code 1"), std::string::npos) << r.output;
}

TEST(CommkitRun, AllRanksFinishingAtDifferentTimesIsSuccess) {
  auto r = RunCommand(RunBin() + " -n 3 -- sh -c 'sleep 0.$RANK'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A library's signal handler (UCX's, PSM's) catches the SIGSEGV, prints it and exits 1: the launcher
// names the signal, and exits like a rank killed by it.
TEST(CommkitRun, ASignalCaughtByALibraryHandlerIsNamed) {
  auto r = RunCommand(RunBin() + " -n 2 --grace 0.2 -- sh -c 'if [ $RANK = 1 ]; then echo \"[h:77:0:77] Caught "
                                 "signal 11 (Segmentation fault: address not mapped to object at address (nil))\" >&2; "
                                 "exit 1; fi; exec sleep 60'");
  EXPECT_EQ(r.exit_code, 128 + 11) << r.output;
  EXPECT_NE(r.output.find("rank 1 died of signal 11 (SIGSEGV"), std::string::npos) << r.output;
}

TEST(CommkitRun, LibrarySignalHandlersAreDisabledUnlessTheUserSetThem) {
  auto r = RunCommand("env -u IPATH_NO_BACKTRACE -u UCX_ERROR_SIGNALS HFI_NO_BACKTRACE=0 " + RunBin() +
                      " -n 1 -- sh -c 'echo ipath=$IPATH_NO_BACKTRACE hfi=$HFI_NO_BACKTRACE "
                      "ucx=${UCX_ERROR_SIGNALS-unset} handle=${UCX_HANDLE_ERRORS-unset} hup=$UCX_DEBUG_SIGNO'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[0] ipath=1 hfi=0 ucx= handle= hup=0"), std::string::npos) << r.output;
  auto kept = RunCommand("env -u IPATH_NO_BACKTRACE " + RunBin() +
                         " --keep-library-signal-handlers -n 1 -- sh -c 'echo ipath=${IPATH_NO_BACKTRACE-unset}'");
  EXPECT_NE(kept.output.find("[0] ipath=unset"), std::string::npos) << kept.output;
}

// Was: SIGKILL to commkit-run left its ranks running.
TEST(CommkitRun, RanksDieWithTheLauncherEvenOnSigkill) {
  testing::TempDir dir;
  std::string pids = (dir.path() / "pids").string();
  std::string cmd = ": > " + pids + "; " + RunBin() + " -n 2 -- sh -c 'echo $$ >> " + pids +
                    "; exec sleep 60' & launcher=$!; i=0; while [ \"$(wc -l < " + pids +
                    ")\" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; kill -9 $launcher; "
                    "wait $launcher 2>/dev/null; "
                    // Alive = exists and is not a zombie; wait up to 5 s for both to go.
                    "j=0; while [ $j -lt 100 ]; do alive=0; for p in $(cat " + pids + "); do "
                    "if [ -e /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; then alive=$((alive+1)); fi; "
                    "done; [ $alive = 0 ] && break; sleep 0.05; j=$((j+1)); done; echo alive=$alive ranks=$(wc -l < " +
                    pids + "); for p in $(cat " + pids + "); do kill -9 $p 2>/dev/null; done; true";
  auto r = RunCommand(cmd);
  EXPECT_NE(r.output.find("alive=0 ranks=2"), std::string::npos) << r.output;
}

std::string FreePort() {
  auto probe = RunCommand("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                          "print(s.getsockname()[1])'");
  return probe.output.substr(0, probe.output.find('\n'));
}

// Two pretend nodes on loopback: a rank failing on node 1 stops node 0's ranks, and both launchers
// exit with its code, naming node and rank.
TEST(CommkitRun, AFailureOnOneNodeStopsEveryNode) {
  testing::TempDir dir;
  std::string port = FreePort();
  ASSERT_FALSE(port.empty());
  std::string prog = " -n 2 --grace 0.3 --kill-after 1 -- sh -c 'if [ $RANK = 3 ]; then sleep 0.5; exit 3; fi; exec sleep 60'";
  std::string common = " --nnodes 2 --master-addr 127.0.0.1 --master-port " + port;
  std::string n0 = (dir.path() / "n0").string();
  auto start = std::chrono::steady_clock::now();
  std::string cmd = "COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 0" + common + prog + " > " + n0 +
                    " 2>&1 & p0=$!; COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 1" + common + prog +
                    " 2>&1; rc1=$?; wait $p0; rc0=$?; echo rc0=$rc0 rc1=$rc1; cat " + n0;
  auto r = RunCommand(cmd);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  EXPECT_NE(r.output.find("rc0=3 rc1=3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("commkit-run: rank 3 on node 1 exited with code 3 first"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("commkit-run: node 0: rank 3 on node 1 exited with code 3 first"), std::string::npos)
      << r.output;
}

// Something already listens on --master-port: node 0's store takes the next free port, node 1 finds
// it, and the ranks get the port actually used. (FreePort() is an ephemeral port, so another program's
// outgoing connection may hold MASTER_PORT+1 without listening there; node 0 then moves on to +2 and
// node 1 must still find it: comm_launch_env_test covers that case deterministically.)
TEST(CommkitRun, MultiNodeStoreCoexistsWithAListenerOnMasterPort) {
  testing::TempDir dir;
  std::string port = FreePort();
  ASSERT_FALSE(port.empty());
  std::string listener = "python3 -c 'import socket,sys,time; s=socket.socket(); "
                         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\"," + port +
                         ")); s.listen(8); print(\"up\", flush=True); t=time.time()\n"
                         "while time.time()-t < 60:\n  c,_=s.accept(); c.close()' > " + (dir.path() / "l").string() +
                         " 2>&1 & lp=$!; i=0; while ! grep -q up " + (dir.path() / "l").string() +
                         " && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
  std::string common = " --nnodes 2 --master-addr 127.0.0.1 --master-port " + port + " -n 1 -- " + Store() +
                       " rendezvous --timeout 30";
  std::string n0 = (dir.path() / "n0").string();
  common = " --timeout 60 --exit-barrier-timeout 20" + common;
  std::string cmd = listener + "COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 0" + common + " > " + n0 +
                    " 2>&1 & p0=$!; COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 1" + common +
                    "; rc1=$?; wait $p0; rc0=$?; kill $lp; echo rc0=$rc0 rc1=$rc1; cat " + n0;
  auto r = RunCommand(cmd);
  EXPECT_NE(r.output.find("rc0=0 rc1=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all 2 ranks arrived"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("all 2 ranks arrived \\(tcp store 127\\.0\\.0\\.1:([0-9]+)\\)")))
      << r.output;
  int used = std::stoi(m[1].str());
  EXPECT_GT(used, std::stoi(port)) << "the store moved past MASTER_PORT:\n" << r.output;
  EXPECT_LE(used, std::stoi(port) + 7) << r.output;
}

// Node 1's launcher is killed while node 0 waits for it at the exit barrier: node 0 stops waiting
// once node 1's heartbeat has been silent for 10 s, not after --exit-barrier-timeout.
TEST(CommkitRun, ExitBarrierEndsWhenAnotherNodesLauncherIsGone) {
  testing::TempDir dir;
  std::string port = FreePort();
  ASSERT_FALSE(port.empty());
  std::string common = " --nnodes 2 --master-addr 127.0.0.1 --master-port " + port + " --exit-barrier-timeout 200";
  std::string n0 = (dir.path() / "n0").string();
  auto start = std::chrono::steady_clock::now();
  std::string cmd = "COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 0" + common + " -n 1 -- true > " + n0 +
                    " 2>&1 & p0=$!; COMMKIT_STORE_TOKEN=t " + RunBin() + " --node-rank 1" + common +
                    " -n 1 -- sleep 100 > /dev/null 2>&1 & p1=$!; i=0; while ! grep -q 'keeping the job' " + n0 +
                    " && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; sleep 2; kill -9 $p1; wait $p0; "
                    "echo rc0=$?; cat " + n0;
  auto r = RunCommand(cmd);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(r.output.find("rc0=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node 1's launcher is gone"), std::string::npos) << r.output;
  EXPECT_LT(took, std::chrono::seconds(90)) << "node 0 waited for a launcher that is gone:\n" << r.output;
}

}  // namespace
}  // namespace commkit::testing
