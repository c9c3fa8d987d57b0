// gpudoctor explain: rules that read the log as a whole or fall back when no message rule fires (a
// topology file in use, resemblance, an init that stops, source files from the catalog, NCCL's setup
// lines read together, tracebacks in different collectives, which error came first) and CUDA runtime errors named by their string, each written in the wording its
// library prints and next to the case it must not claim.
#include <gtest/gtest.h>

#include <string>

#include "commkit/diagnostics/explain.h"
#include "explain_test_support.h"

namespace commkit::diagnostics {
namespace {

// NCCL_TOPO_FILE / NCCL_GRAPH_FILE given to NCCL (a vendor image's /etc/nccl.conf) and an init error
// without detail: the file is the first suspect, above the generic /dev/shm guess.
TEST(ExplainTest, AGivenTopologyFileIsTheSuspectOfAnInitErrorWithoutDetail) {
  const std::string failure =
      "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system "
      "error, NCCL version 2.18.5\n";
  Explanation with = ExplainLog("h:1:2 [0] NCCL INFO Loading topology file /opt/microsoft/ncv4/topo.xml\n" + failure);
  EXPECT_EQ(Claim(with), "topo.file");
  EXPECT_EQ(with.Best()->confidence, Confidence::kLow);
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/graph.xml\n" + failure)),
            "topo.file");
  EXPECT_EQ(Claim(ExplainLog(failure)), "shm.space");
}

// A failure no rule knows still gets the family whose known cases it resembles, at low confidence and
// saying so; text without a failure in it gets nothing.
TEST(ExplainTest, AnUnrecognisedFailureGetsOnlyALowResemblance) {
  Explanation ex = ExplainLog("RuntimeError: failed: P2P between the peer GPUs could not map each other's memory over "
                              "PCIe (ACS enabled)\n");
  ASSERT_NE(ex.Best(), nullptr);
  EXPECT_EQ(ex.Best()->signature, "p2p.unsupported");
  EXPECT_EQ(ex.Best()->confidence, Confidence::kLow);
  EXPECT_NE(ex.Best()->cause.find("resembles"), std::string::npos) << ex.Best()->cause;
  EXPECT_FALSE(ex.Best()->fix.empty());
  ASSERT_FALSE(ex.Best()->evidence.empty());
  EXPECT_EQ(ex.Best()->evidence.front().line, 1);
  EXPECT_EQ(ExplainLog("ACS is enabled on the PCIe switches between the peer GPUs\n").Best(), nullptr);
  // `unknown` labels unsettled threads; it is no family a log can resemble (CAUSES.md describes it in
  // words of its own, which once made it one).
  EXPECT_NE(Claim(ExplainLog("RuntimeError: the watchdog thread did not settle the cause of the failed operation\n")),
            "unknown");
  EXPECT_EQ(ExplainLog("").Best(), nullptr);
}

// A log that shows no failure but stops in NCCL's init: the last stage names the suspect, at low
// confidence (a cut paste looks the same); a finished init or any error line leaves it to other rules.
TEST(ExplainTest, AnInitThatStopsWithoutAnErrorIsAStallAtItsLastStage) {
  const std::string boot = "h1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                           "h1:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so)\n";
  Explanation at_boot = ExplainLog(boot + "h1:1:1 [0] NCCL INFO NET/IB : No device found.\n");
  EXPECT_EQ(Claim(at_boot), "socket.unreachable");
  EXPECT_EQ(at_boot.Best()->confidence, Confidence::kLow);
  const std::string p2p = boot +
                          "h1:1:9 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n"
                          "h1:1:9 [0] NCCL INFO Channel 00/0 : 0[1000] -> 1[2000] via P2P/IPC\n"
                          "h1:1:9 [0] NCCL INFO Connected all rings\n";
  EXPECT_EQ(Claim(ExplainLog(p2p)), "p2p.unsupported");
  EXPECT_EQ(Claim(ExplainLog(boot + "h1:1:9 [0] NCCL INFO Channel 00/0 : 0[1000] -> 2[1000] [send] via NET/Socket/0\n")),
            "socket.wrong_interface");
  EXPECT_EQ(ExplainLog(p2p + "h1:1:9 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
                .Best(),
            nullptr);
  EXPECT_EQ(Claim(ExplainLog(p2p + "h1:1:9 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x "
                                   "(size 9637888), error: No space left on device (28)\n")),
            "shm.space");
  EXPECT_EQ(ExplainLog("Requested train epochs: 10\n").Best(), nullptr);
  // Two GPUs of one machine that stop before any channel: not TCP between hosts, the peer-to-peer hang.
  const std::string one_host = boot + "h1:2:2 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n";
  EXPECT_EQ(Claim(ExplainLog(one_host)), "p2p.unsupported");
  EXPECT_EQ(ExplainLog(one_host).Best()->confidence, Confidence::kLow);
  EXPECT_EQ(Claim(ExplainLog(boot + "h2:2:2 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n")),
            "socket.unreachable");
}

// Older NCCL releases print no "file.cc:line" before "NCCL WARN"; the message catalog knows which source
// file prints the format, so the same subsystem hint applies.
TEST(ExplainTest, TheCatalogNamesTheSourceFileOfAWarningWithoutOne) {
  const std::string without = "h:1:2 [0] NCCL WARN Could not find GPU with rank 3\n";
  const std::string with = "h:1:2 [0] graph/search.cc:1000 NCCL WARN Could not find GPU with rank 3\n";
  EXPECT_EQ(Claim(ExplainLog(without)), "topo.file");
  EXPECT_EQ(Claim(ExplainLog(with)), "topo.file");
  EXPECT_EQ(ExplainLog(without).Best()->confidence, Confidence::kLow);
  Explanation old_driver =
      ExplainLog("h:1:2 [0] NCCL WARN CUDA Driver version found is 11040. Minimum requirement is 12020\n");
  EXPECT_EQ(HighClaim(old_driver), "cuda.driver_too_old");
}

// What NCCL's setup lines say together: GPUDirect RDMA on some ranks only, IB asked for but absent, a
// crash with nothing else wrong; and the launchers' ways of saying a rank got SIGKILL.
TEST(ExplainTest, SetupLinesReadTogether) {
  const std::string gdr = "a:1:2 [0] NCCL INFO Channel 00/0 : 9[1a000] -> 2[6b000] [send] via NET/IB/0/GDRDMA\n";
  const std::string staged = "b:1:2 [0] NCCL INFO Channel 00/0 : 2[6b000] -> 9[1a000] [send] via NET/IB/1\n";
  EXPECT_EQ(Claim(ExplainLog(gdr + staged)), "ib.gdr");
  EXPECT_EQ(ExplainLog(gdr).Best(), nullptr);
  EXPECT_EQ(ExplainLog(staged).Best(), nullptr);

  const std::string no_ib = "h:1:2 [0] NCCL INFO NET/IB : No device found.\n"
                            "h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n";
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1\n" + no_ib)), "ib.no_device");
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n" + no_ib)),
            "ib.no_device");
  EXPECT_NE(Claim(ExplainLog(no_ib)), "ib.no_device");  // every machine without IB prints it

  // No rdma-core in the image of a machine with InfiniBand: sockets over IPoIB (sgl-project/sglang#1427).
  const std::string no_verbs = "h:1:2 [0] NCCL INFO Failed to open libibverbs.so[.1]\n";
  EXPECT_EQ(Claim(ExplainLog(no_verbs + "h:1:2 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.5<0>\n")),
            "ib.no_device");
  EXPECT_NE(Claim(ExplainLog(no_verbs + "h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n")),
            "ib.no_device");  // a cloud VM without IB

  const std::string crash = "h:1:2 [0] NCCL INFO RAS client listening socket at ::1<28028>\n"
                            "[h:405884] *** Process received signal ***\n";
  EXPECT_EQ(Claim(ExplainLog(crash)), "nccl.bug");
  EXPECT_EQ(ExplainLog(crash).Best()->confidence, Confidence::kLow);
  EXPECT_EQ(Claim(ExplainLog("[h:405884] *** Process received signal ***\n")), "none");

  EXPECT_EQ(Claim(ExplainLog("[launch.py:315:sigkill_handler] Killing subprocess 4051\n"
                             "exits with return code = -9\n")),
            "host.oom");
  // An errno under an `fi_info -p efa` header is libfabric's.
  EXPECT_EQ(Claim(ExplainLog("| Pod spec | `fi_info -p efa` |\n| WITH hostPath | -61 No data available |\n")),
            "efa.provider");
}

// ENODEV from ibv_modify_qp: the HCA is open and the QP exists, so either the HCA should not be used
// (NVIDIA/nccl#799) or its GID entry has no netdev here; the GID setup in the log decides the order.
TEST(ExplainTest, ModifyQpWithoutADeviceNamesTheHcaAndTheGidEntry) {
  const std::string fail = "h:1:2 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error No such "
                           "device\nh:1:2 [0] NCCL INFO transport/net_ib.cc:395 -> 2\n";
  Explanation bare = ExplainLog(fail);
  EXPECT_EQ(Claim(bare), "ib.no_device");
  EXPECT_TRUE(Mentions(bare, "ib.gid_index"));
  EXPECT_NE(bare.Best()->confidence, Confidence::kHigh);
  Explanation gid = ExplainLog("h:1:2 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n" + fail);
  EXPECT_EQ(Claim(gid), "ib.gid_index");
  EXPECT_NE(gid.Best()->confidence, Confidence::kHigh);
}

// Ranks whose Python tracebacks end in different torch.distributed collectives issued different
// operations; the object variants fold into their base collective, and c10d's own barrier inside
// init_process_group / new_group is not a second collective.
TEST(ExplainTest, TracebacksInDifferentCollectivesAreADesync) {
  const std::string bcast =
      "  File \"/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py\", line 2700, in broadcast\n"
      "    work = group.broadcast([tensor], opts)\n";
  const std::string barrier = "  File \"/work/train.py\", line 88, in step\n    torch.distributed.barrier(group=pg)\n";
  Explanation desync = ExplainLog("Traceback (most recent call last):\n" + bcast + "Traceback (most recent call last):\n" +
                                  barrier + "KeyboardInterrupt\n");
  EXPECT_EQ(Claim(desync), "collective.mismatch");
  EXPECT_NE(desync.Best()->confidence, Confidence::kHigh);
  EXPECT_EQ(desync.Best()->evidence.size(), 2u);
  const std::string object =
      "  File \"/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py\", line 3100, in "
      "broadcast_object_list\n"
      "    broadcast(object_sizes_tensor, src=src, group=group)\n";
  EXPECT_NE(Claim(ExplainLog("Traceback (most recent call last):\n" + object + bcast + "KeyboardInterrupt\n")),
            "collective.mismatch");
  EXPECT_NE(Claim(ExplainLog("Traceback (most recent call last):\n  File \"/work/train.py\", line 9, in main\n"
                             "    dist.init_process_group(\"nccl\")\n" + barrier + bcast + "KeyboardInterrupt\n")),
            "collective.mismatch");
}

// Gloo advertises the address its hostname resolves to; Debian and Ubuntu map the hostname to 127.0.1.1.
TEST(ExplainTest, AConnectToTheHostnamesLoopbackAddressIsTheWrongInterface) {
  Explanation ex = ExplainLog(
      "terminate called after throwing an instance of 'gloo::IoException'\n"
      "  what():  [third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:44123: Connection refused\n");
  EXPECT_EQ(Claim(ex), "socket.wrong_interface");
  EXPECT_NE(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_EQ(Claim(ExplainLog("  what():  [third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.1.2.3]:44123: "
                             "Connection refused\n")),
            "socket.unreachable");
}

// The first real error leads: a CUDA fault NCCL reports while tearing down a communicator whose network
// failed is a consequence, though the fault's own rule scores higher.
TEST(ExplainTest, TheFirstErrorOutranksALaterCudaFault) {
  Explanation ex = ExplainLog(
      "n1:10:20 [0] transport/net_ib.cc:1700 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4431> with status=12 "
      "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGids ::ffff:10.0.0.2\n"
      "n1:10:10 [0] NCCL INFO Destroyed comm 0x7f00 rank 0\n"
      "n1:10:10 [0] init.cc:194 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n");
  ASSERT_NE(ex.Best(), nullptr);
  EXPECT_EQ(ex.Best()->signature.rfind("ib.", 0), 0u) << ex.Best()->signature;
  EXPECT_EQ(Claim(ExplainLog("n1:10:10 [0] init.cc:194 NCCL WARN Cuda failure 'an illegal memory access was "
                             "encountered'\n")),
            "cuda.illegal_access");
}

// CUDA runtime errors whose meaning names a family, by their runtime string as PyTorch prints it.
TEST(ExplainTest, MoreCudaRuntimeErrorsMapToFamilies) {
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: device-side assert triggered\n")), "cuda.illegal_access");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: exclusive-thread device already in use by a different "
                             "thread\n")),
            "gpu.duplicate");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: peer mapping resources exhausted\n")), "p2p.unsupported");
  EXPECT_NE(ExplainLog("RuntimeError: CUDA error: device-side assert triggered\n").Best()->confidence,
            Confidence::kHigh);
}

// A line that lists possible causes names none of them: Ray's raylet message offers the OOM killer as
// one of three; the kernel's own OOM line stays a proof.
TEST(ExplainTest, ALineListingPossibleCausesProvesNone) {
  Explanation hedged = ExplainLog(
      "(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker exit "
      "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
      "file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high "
      "memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV.\n");
  ASSERT_NE(hedged.Best(), nullptr);
  EXPECT_NE(hedged.Best()->confidence, Confidence::kHigh) << Claim(hedged);
  Explanation kernel = ExplainLog("[12345.678] Out of memory: Killed process 4242 (python) total-vm:1234kB\n"
                                  "RuntimeError: worker exited with error\n");
  EXPECT_EQ(HighClaim(kernel), "host.oom");
}

// A dma-buf registration pins nothing against RLIMIT_MEMLOCK: its ENOMEM is no proof of the limit,
// while the plain ibv_reg_mr ENOMEM still is.
TEST(ExplainTest, ADmaBufRegistrationFailureIsNotTheLockedMemoryLimit) {
  Explanation dmabuf = ExplainLog(
      "node1:318:3584 [5] misc/ibvwrap.cc:183 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Cannot "
      "allocate memory\n");
  ASSERT_NE(dmabuf.Best(), nullptr);
  EXPECT_NE(dmabuf.Best()->confidence, Confidence::kHigh) << Claim(dmabuf);
  Explanation plain = ExplainLog(
      "node1:318:3584 [5] misc/ibvwrap.cc:183 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate "
      "memory\n");
  EXPECT_EQ(HighClaim(plain), "ib.memlock");
}

// PyTorch checks for two ranks on one GPU before NCCL does, in its own words.
TEST(ExplainTest, PyTorchsDuplicateGpuCheckIsADuplicateGpu) {
  Explanation ex = ExplainLog(
      "RuntimeError: Duplicated GPU device is not allowed by NCCL. Rank [0] and rank [8] both attached to GPU "
      "device 0 on the same host node7. Most likely your world_size is larger than the total number of GPUs\n");
  EXPECT_EQ(HighClaim(ex), "gpu.duplicate");
}

// With NCCL_SOCKET_IFNAME unset NCCL's bootstrap prefers ib* interfaces; failed connections after it
// picked IPoIB (different interfaces on the two nodes) point at the interface, not at the network.
TEST(ExplainTest, IpoibPickedForTheBootstrapWhenConnectionsFailIsTheWrongInterface) {
  const std::string setup =
      "nodea:2293:2293 [0] NCCL INFO Bootstrap : Using ibp12s0:192.168.4.102<0>\n"
      "nodeb:2331:2666 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP; OOB "
      "ibp75s0:192.168.0.103<0>\n";
  const std::string failure =
      "nodeb:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2\n"
      "nodeb:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2\n";
  Explanation ex = ExplainLog(setup + failure);
  EXPECT_EQ(Claim(ex), "socket.wrong_interface");
  EXPECT_NE(ex.Best()->confidence, Confidence::kHigh);
  // With NCCL's own "No route to host" the unreachable peer leads, and the interface is the next candidate.
  Explanation warned = ExplainLog(setup + failure +
                                  "nodeb:2330:2658 [2] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                                  "192.168.4.102<45321> failed : No route to host\n");
  ASSERT_GE(warned.diagnoses.size(), 2u);
  EXPECT_EQ(warned.diagnoses[1].signature, "socket.wrong_interface") << Claim(warned);
  // The same failure over Ethernet says nothing about the interface.
  EXPECT_FALSE(Mentions(ExplainLog("nodea:2293:2293 [0] NCCL INFO Bootstrap : Using eth0:192.168.4.102<0>\n" + failure),
                        "socket.wrong_interface"));
}

}  // namespace
}  // namespace commkit::diagnostics
