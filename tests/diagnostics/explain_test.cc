// gpudoctor explain: the reader, the catalog matcher, the cause rules on messages the hand-written
// signatures of the first version missed (issue #15), several logs at once, and hostile input (#19).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catalog.h"
#include "commkit/diagnostics/explain.h"
#include "explain_test_support.h"
#include "test_support.h"

namespace commkit::diagnostics {
namespace {

// Message families beyond the first tuning set: each written in the wording its library prints.
TEST(ExplainTest, GeneralFamiliesFromTheSecondBatch) {
  // "default_pg" contains "efa": not an EFA log; a watchdog timeout.
  Explanation t = ExplainLog(
      "[rank1]:[E1205 04:35:53.58 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600100 milliseconds "
      "before timing out.\n"
      "[rank1]:[E1205 04:35:53.59 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] Exception (either an error "
      "or timeout) detected by watchdog at work: 12, last enqueued NCCL work: 12, last completed NCCL work: 11.\n");
  EXPECT_EQ(Claim(t), "collective.timeout");
  EXPECT_EQ(ExplainLog("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<long>) + 0x1d2\n")
                .Best()->signature,
            "collective.timeout");
  // A SIGBUS inside NCCL's shared-memory code: /dev/shm full (medium, not a proof).
  Explanation bus = ExplainLog("Thread 7 \"python\" received signal SIGBUS, Bus error.\n"
                               "#0 0x00007f in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) ()\n");
  EXPECT_EQ(Claim(bus), "shm.space");
  EXPECT_EQ(bus.Best()->confidence, Confidence::kMedium);
  // EAFNOSUPPORT when NCCL creates its socket: no usable interface (beats the generic system-error hint).
  EXPECT_EQ(Claim(ExplainLog("NCCL error: unhandled system error\n"
                             "h:1:1 [0] include/socket.h:311 NCCL WARN Socket creation failed : Address family not "
                             "supported by protocol\n")),
            "socket.ifname_missing");
  // A refused connect to a link-local address: the wrong interface, even in a one-host excerpt.
  EXPECT_EQ(Claim(ExplainLog("NET/Socket : Using [0]eth0:10.0.0.5<0> [1]link0:169.254.10.2<0>\n"
                             "socketPollConnect: connect to 169.254.10.3<4242> returned Connection refused, "
                             "retrying (3/34)\n")),
            "socket.wrong_interface");
  // The locked-memory limit in words, and a UCX memory registration with ENOMEM (a proof).
  Explanation ml = ExplainLog("UCX  ERROR mlx5_0: mlx5dv_devx_umem_reg(size=131072 access=0x0) failed: Cannot allocate "
                              "memory\n");
  EXPECT_EQ(HighClaim(ml), "ib.memlock");
  // `ulimit -a` reporting an unlimited limit is no evidence at all.
  EXPECT_EQ(ExplainLog("max locked memory       (kbytes, -l) unlimited\n").Best(), nullptr);
  // NCCL's socket transport names a size mismatch between ranks.
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] transport/net_socket.cc:500 NCCL WARN NET/Socket : peer 10.0.0.2<1234> message "
                             "truncated : receiving 1024 bytes instead of 512\n")),
            "collective.mismatch");
}

// High is granted only for a provable family, on a failure line, with no second strong family.
TEST(ExplainTest, HighNeedsAProvableFamilyAnErrorLineAndNoStrongRival) {
  // A store waiting for clients proves a rank did not arrive, not why: never high.
  Explanation store = ExplainLog("RuntimeError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n");
  EXPECT_EQ(Claim(store), "store.rendezvous_timeout");
  EXPECT_NE(store.Best()->confidence, Confidence::kHigh);
  // Queue creation with ENOMEM also comes from device queue limits: medium.
  Explanation cq = ExplainLog("h:1:1 [0] NCCL WARN NET/IB : ibv_create_cq failed: Cannot allocate memory\n");
  EXPECT_EQ(Claim(cq), "ib.memlock");
  EXPECT_EQ(cq.Best()->confidence, Confidence::kMedium);
  // A bind failure proves the store's port only on or just below a line that names the store: jobs bind
  // other ports too (an inference server's HTTP port).
  std::string far = "INFO: torch.distributed.init_process_group done, world size 8\n";
  for (int i = 0; i < 20; ++i) far += "INFO: loading shard " + std::to_string(i) + "\n";
  Explanation http = ExplainLog(far + "ERROR: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
                                      "address already in use\n");
  EXPECT_EQ(Claim(http), "store.port_in_use");
  EXPECT_NE(http.Best()->confidence, Confidence::kHigh);
  Explanation store_bind = ExplainLog("[W socket.cpp:436] [c10d] The server socket has failed to bind to "
                                      "0.0.0.0:29500 (errno: 98 - Address already in use).\n"
                                      "RuntimeError: The server socket has failed to listen on any local network "
                                      "address. Address already in use\n");
  EXPECT_EQ(HighClaim(store_bind), "store.port_in_use");
  // "killed process" without the kernel's OOM wording: medium.
  Explanation killed = ExplainLog("torch.distributed.elastic: killed process 1234 (python) after a failure\n");
  EXPECT_EQ(Claim(killed), "host.oom");
  EXPECT_NE(killed.Best()->confidence, Confidence::kHigh);
  // A proof of one family beside a strong case for another (an NVLS failure): the log does not say
  // which broke the run, so the best claim is medium.
  Explanation two = ExplainLog(
      "h:1:1 [0] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument' (NVLS multicast setup)\n"
      "h:1:1 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-ab to 9637892 bytes, error: No "
      "space left on device (28)\n");
  ASSERT_NE(two.Best(), nullptr);
  EXPECT_EQ(two.Best()->signature, "shm.space");
  EXPECT_EQ(two.Best()->confidence, Confidence::kMedium);
}

// Error codes carry the family when the wording is unknown to the rules: CUDA codes by number, by
// name and by the cudaGetErrorString text the catalog knows; errnos a subsystem reports.
TEST(ExplainTest, ErrorCodesMapToFamilies) {
  // By number next to a CUDA context, by runtime name, by driver name, by a driver call's return value.
  EXPECT_EQ(Claim(ExplainLog("F1127 13:49:06.7 17418 device.cc:565] Check failed: cudaSuccess == cudaStat (0 vs. 100) "
                             "Cuda Error\n")),
            "cuda.no_device");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error code=802(cudaErrorSystemNotReady)\n")), "cuda.system_not_ready");
  EXPECT_EQ(Claim(ExplainLog("jax: INTERNAL: CUDA_ERROR_OUT_OF_MEMORY: out of memory while allocating\n")), "cuda.oom");
  Explanation stub = ExplainLog("h:1:1 [0] misc/cudawrap.cc:100 NCCL WARN cuDriverGetVersion failed with 34\n");
  EXPECT_EQ(Claim(stub), "cuda.no_device");
  EXPECT_EQ(stub.Best()->confidence, Confidence::kMedium);
  // The runtime's own string, without a code: the catalog names the code (46, 209).
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n")),
            "gpu.duplicate");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable\n")),
            "gpu.duplicate");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")),
            "nccl.bug");
  // cudaErrorInvalidValue alone says nothing; inside the P2P transport it points at peer access.
  EXPECT_EQ(ExplainLog("h:1:1 [0] enqueue.cc:10 NCCL WARN Cuda failure 1 'invalid argument'\n").Best(), nullptr);
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] transport/p2p.cc:300 NCCL WARN Cuda failure 'invalid argument'\n")),
            "p2p.unsupported");
  // Curly quotes from a pasted log are read as the ASCII NCCL printed.
  EXPECT_EQ(Claim(ExplainLog("Last error:\nCuda failure 2 \xE2\x80\x98out of memory\xE2\x80\x99\n")), "cuda.oom");
  // Subsystem errnos: ENODEV from a verb (a device that is not there, not a GID), FI_ENODATA from libfabric.
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_3:1/RoCE ; OOB eth1:10.0.0.1<0>\n"
                             "h:1:1 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error No such "
                             "device\n")),
            "ib.no_device");
  EXPECT_EQ(Claim(ExplainLog("$ fi_info -p efa\nfi_getinfo: -61 (No data available)\n")), "efa.provider");
  // Messages whose meaning NCCL's sources fix: no interface for the OOB setting, a failed buffer
  // allocation, an HCA async error event.
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] misc/socket.cc:1 NCCL WARN no device found matching eth9, verify "
                             "NCCL_OOB_NET_IFNAME\n")),
            "socket.ifname_missing");
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n")), "cuda.oom");
  EXPECT_EQ(Claim(ExplainLog("h:1:1 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async error event: port "
                             "error\n")),
            "ib.completion_error");
}

// What a library suggests is not a proof of its suggestion; a fingerprint differing only in its sequence
// number is not a proof that ranks called different collectives.
TEST(ExplainTest, AdviceAndSequenceOnlyMismatchesAreNotProofs) {
  Explanation ucx = ExplainLog("[1668693503.47] [a:1:0] ib_log.c:246 UCX ERROR mlx5_0: ibv_create_cq() failed: Cannot "
                               "allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 "
                               "kbytes)\n");
  EXPECT_EQ(Claim(ucx), "ib.memlock");
  EXPECT_EQ(ucx.Best()->confidence, Confidence::kMedium);
  Explanation seq = ExplainLog("RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running "
                               "collective: CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 2 is "
                               "running collective: CollectiveFingerPrint(SequenceNumber=0OpType=BARRIER).\n");
  EXPECT_EQ(Claim(seq), "collective.mismatch");
  EXPECT_EQ(seq.Best()->confidence, Confidence::kMedium);
  Explanation op = ExplainLog("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
                              "collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE), but Rank 1 is "
                              "running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=REDUCE).\n");
  EXPECT_EQ(op.Best()->confidence, Confidence::kHigh);
}

TEST(ExplainTest, EmptyAndUnknownLogsMakeNoClaim) {
  EXPECT_EQ(ExplainLog("").Best(), nullptr);
  Explanation ex = ExplainLog("hello\nworld\nnode1:1:2 [0] NCCL INFO Init COMPLETE\n");
  EXPECT_EQ(ex.Best(), nullptr);
  EXPECT_NE(ex.ToText().find("No confident claim"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(ex.ToJson())["claim"], "no confident claim");
}

TEST(ExplainTest, ShmEnospcIsHighAndSkipsEnvelope) {
  const char* log =
      "RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1\n"
      "ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n"
      "h1:10:11 [1] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-ab to 9637892 bytes, error: No "
      "space left on device (28)\n"
      "h1:10:11 [1] NCCL INFO transport/shm.cc:551 -> 2\n";
  Explanation ex = ExplainLog(log);
  ASSERT_NE(ex.Best(), nullptr);
  EXPECT_EQ(ex.Best()->signature, "shm.space");
  EXPECT_EQ(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_EQ(ex.Best()->evidence.at(0).line, 3);
  EXPECT_EQ(ex.facts.first_error.line, 3);  // not the envelope on line 1/2
  EXPECT_EQ(ex.facts.hosts, std::vector<std::string>{"h1"});
  EXPECT_NE(ex.Best()->confirm.find("df -h /dev/shm"), std::string::npos);
  EXPECT_FALSE(ex.Best()->basis.empty());
}

// The same failure as printed by other NCCL releases (posix_fallocate in include/shm.h, 2.7-2.11) and by
// another framework's text around it.
TEST(ExplainTest, ShmEnospcFromOtherReleases) {
  Explanation a = ExplainLog(
      "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
      "[3] NCCL INFO include/shm.h:41 -> 2\n"
      "[3] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-1-2-3 (size 9637888)\n");
  EXPECT_EQ(HighClaim(a), "shm.space");
  Explanation b = ExplainLog(
      "2024-05-01 10:00:00.123456: E external/xla/xla/service/gpu/nccl_utils.cc:297] NCCL operation failed\n"
      "h:1:2 [0] misc/shmutils.cc:72 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size "
      "9637888), error: No space left on device (28)\n");
  EXPECT_EQ(HighClaim(b), "shm.space");
  // Permission problems are not space problems.
  Explanation c = ExplainLog(
      "n:1:2 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
      "n:1:2 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-b7 (size 4460544)\n");
  EXPECT_EQ(Claim(c), "shm.other");
}

TEST(ExplainTest, FirstErrorSkipsHeaderLines) {
  Explanation ex = ExplainLog(
      "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid usage (run with "
      "NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n"
      "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
      "Last error:\n"
      "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000\n");
  EXPECT_EQ(ex.facts.first_error.line, 4);
  EXPECT_EQ(HighClaim(ex), "gpu.duplicate");
  EXPECT_NE(ex.Best()->cause.find("ranks 0 and 1 on CUDA device 2000"), std::string::npos) << ex.Best()->cause;
  EXPECT_EQ(ex.facts.nccl_versions, std::vector<std::string>{"2.19.3"});
}

TEST(ExplainTest, IfnameHighOnlyWhenTheLogShowsIt) {
  std::string base = "n:1:1 [0] bootstrap.cc:37 NCCL WARN Bootstrap : no socket interface found\n";
  EXPECT_EQ(ExplainLog(base).Best()->confidence, Confidence::kMedium);
  Explanation ex = ExplainLog("n:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n" + base);
  EXPECT_EQ(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_NE(ex.Best()->cause.find("NCCL_SOCKET_IFNAME=eth0"), std::string::npos);
  EXPECT_EQ(ex.facts.env.at("NCCL_SOCKET_IFNAME"), "eth0");
  // An IFNAME that matches an interface NCCL listed is not proven wrong by "no socket interface found".
  Explanation listed = ExplainLog("n:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth\n"
                                  "n:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n" + base);
  EXPECT_NE(listed.Best()->confidence, Confidence::kHigh);
}

TEST(ExplainTest, IfnameGarbageAddressFamily) {
  Explanation ex = ExplainLog(
      "[trainer3]:tw:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
      "[trainer0|0]:ncclInternalError: Internal check failed.\n"
      "[trainer0|0]:Last error:\n"
      "[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor AF_INET6(10)\n");
  EXPECT_EQ(HighClaim(ex), "socket.ifname_missing");
  EXPECT_EQ(ex.facts.first_error.line, 4);
  EXPECT_EQ(ex.facts.ranks, (std::vector<int>{3, 0}));
}

TEST(ExplainTest, DriverTooOld) {
  Explanation ex = ExplainLog(
      "91: idgsim-gpu-001:47744:47744 [0] init.cu:674 WARN Cuda failure 'CUDA driver version is insufficient for CUDA "
      "runtime version'\n");
  EXPECT_EQ(HighClaim(ex), "cuda.driver_too_old");
}

TEST(ExplainTest, IbRegMrMemlock) {
  Explanation ex = ExplainLog(
      "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
      "h:1:2 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n"
      "h:1:2 [0] NCCL INFO transport/net_ib.cc:1036 -> 2\n");
  EXPECT_EQ(HighClaim(ex), "ib.memlock");
  EXPECT_EQ(ex.facts.ib_devices, std::vector<std::string>{"mlx5_0:1/IB"});
  EXPECT_EQ(ex.facts.link_layers, std::vector<std::string>{"IB"});
  // Without the errno it is only the usual suspect.
  Explanation weak = ExplainLog("h:1:2 [4] ibvwrap.c:130 NCCL WARN Call to ibv_create_qp failed\n");
  EXPECT_EQ(Claim(weak), "ib.memlock");
  EXPECT_NE(weak.Best()->confidence, Confidence::kHigh);
}

// commkit's own first GPU run (docs/gpu-validation.md): a split on a nonblocking communicator used
// before NCCL finished it. NCCL's INFO probe of the missing IB plugin is no error.
TEST(ExplainTest, NonblockingCommunicatorUsedTooEarly) {
  Explanation ex = ExplainLog(
      "vm:566:573 [0] NCCL INFO Failed to initialize NET plugin IB\n"
      "[2026-11-24 09:45:28] vm:566:566 [0] init.cc:381 NCCL WARN Attempt to use communicator before the previous "
      "operation returned ncclSuccess\n"
      "vm:566:578 [0] NCCL INFO ncclCommSplit comm 0x5580f4093170 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 "
      "parent 0x5580f3f89660 splitCount 1 color 0 key 0- Init START\n"
      "[2026-11-24 09:45:28] vm:566:566 [0] group.cc:86 NCCL WARN ncclAsyncJobComplete: job 0x5580f31291f0 failed, "
      "job error 3\n");
  EXPECT_EQ(ex.facts.first_error.line, 2);
  EXPECT_EQ(Claim(ex), "nccl.nonblocking_usage");
  EXPECT_NE(ex.Best()->confidence, Confidence::kHigh);
  EXPECT_NE(ex.Best()->fix.find("ncclCommGetAsyncError"), std::string::npos) << ex.Best()->fix;
  // After an earlier NCCL failure the same line is its echo: the earlier cause comes first.
  Explanation echo = ExplainLog(
      "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
      "h:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5> with error 12, "
      "opcode 3, len 3, vendor err 81 (Send)\n"
      "h:1:1 [0] init.cc:381 NCCL WARN Attempt to use communicator before the previous operation returned "
      "ncclSuccess\n");
  EXPECT_EQ(Claim(echo), "ib.completion_error");
}

TEST(ExplainTest, OldCompletionFormatOnRoceSuggestsGid) {
  Explanation ex = ExplainLog(
      "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE ; OOB ens1:10.0.0.1<0>\n"
      "h:1:2 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129\n");
  EXPECT_EQ(Claim(ex), "ib.gid_index");
  EXPECT_NE(ex.Best()->confidence, Confidence::kHigh);  // a hypothesis: never proven by the log
  EXPECT_TRUE(Mentions(ex, "ib.completion_error"));
  EXPECT_NE(ex.Best()->confirm.find("show_gids"), std::string::npos);
  // Completion errors on plain IB point at the fabric, not at GIDs.
  Explanation ib = ExplainLog(
      "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
      "h:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5> with error 4, "
      "opcode 3, len 3, vendor err 81 (Send)\n");
  EXPECT_EQ(Claim(ib), "ib.completion_error");
}

TEST(ExplainTest, EfaProvider) {
  Explanation ex = ExplainLog(
      "ip-1:1:2 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws\n"
      "ip-1:1:2 [0] nccl_net_ofi_rdma.c:6730 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available\n");
  EXPECT_EQ(Claim(ex), "efa.provider");
}

TEST(ExplainTest, WatchdogRanksAtDifferentOpsIsAMismatch) {
  Explanation same = ExplainLog(
      "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 milliseconds "
      "before timing out.\n"
      "[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 milliseconds "
      "before timing out.\n");
  EXPECT_EQ(Claim(same), "collective.timeout");
  EXPECT_NE(same.Best()->confidence, Confidence::kHigh);
  EXPECT_NE(same.Best()->cause.find("ALLREDUCE SeqNum=42"), std::string::npos) << same.Best()->cause;
  EXPECT_NE(same.Best()->confirm.find("TORCH_NCCL_DUMP_ON_TIMEOUT=1"), std::string::npos);

  Explanation diff = ExplainLog(
      "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 ms\n"
      "[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 ms\n"
      "[rank2]:[E ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 ms\n");
  EXPECT_EQ(Claim(diff), "collective.mismatch");
  // Three lines together make the case; no single message proves a desync, so not high.
  EXPECT_EQ(diff.Best()->confidence, Confidence::kMedium);
  ASSERT_FALSE(diff.divergences.empty());
  EXPECT_EQ(diff.divergences.front().kind, "different_op");
  EXPECT_EQ(diff.divergences.front().source, "rank 1");
}

// Rules that follow from what the NCCL / PyTorch / verbs sources mean, each next to the case it must not claim.
TEST(ExplainTest, SourceSemanticsRefineTheFamily) {
  // Point-to-point work shares the sequence numbers: a SEND facing a RECV at one SeqNum is a matched pair.
  Explanation pair = ExplainLog(
      "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=7, OpType=SEND, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 ms\n"
      "[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=7, OpType=RECV, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 ms\n");
  EXPECT_EQ(Claim(pair), "collective.timeout");

  // Retries exceeded on an IPv4-mapped RoCE v2 GID (NCCL's preferred, routable choice): the fabric, not the index.
  const char* completion =
      "h:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<123> with status=12 "
      "opcode=0 len=0 vendor err 129 (Send) localGid %s remoteGids%s\n";
  char v4[512], ll[512];
  std::snprintf(v4, sizeof v4, completion, "::ffff:10.0.0.1", " ::ffff:10.0.0.2");
  std::snprintf(ll, sizeof ll, completion, "fe80::1", " fe80::2");
  EXPECT_EQ(Claim(ExplainLog(v4)), "ib.completion_error");
  EXPECT_EQ(Claim(ExplainLog(ll)), "ib.gid_index");

  // ENOMEM from ibv_reg_mr proves the memlock limit only while the log does not show it unlimited.
  const std::string reg = "h:1:2 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot "
                          "allocate memory\n";
  EXPECT_EQ(ExplainLog(reg).Best()->confidence, Confidence::kHigh);
  Explanation unlimited = ExplainLog("max locked memory       (kbytes, -l) unlimited\n" + reg);
  ASSERT_NE(unlimited.Best(), nullptr);
  EXPECT_NE(unlimited.Best()->confidence, Confidence::kHigh);
  // Advice to make it unlimited is not the limit being unlimited.
  EXPECT_EQ(ExplainLog("Please set max locked memory (ulimit -l) to unlimited\n" + reg).Best()->confidence,
            Confidence::kHigh);

  // EFAULT pinning a GPU buffer: GPUDirect RDMA is missing.
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Bad "
                             "address\n")),
            "ib.gdr");
  // Asynchronous HCA events: errors are a fabric problem, bookkeeping events are nothing.
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] transport/net_ib.cc:90 NCCL WARN NET/IB : mlx5_0:1 Got async event : port "
                             "error\n")),
            "ib.completion_error");
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] transport/net_ib.cc:90 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID "
                             "table change\n")),
            "none");
  // ncclRemoteError is NCCL saying the peer went away.
  EXPECT_EQ(Claim(ExplainLog("ncclRemoteError: A call failed possibly due to a network error or a remote process "
                             "exiting prematurely.\n")),
            "socket.peer_closed");
  // The bootstrap root saw ranks with different communicator sizes.
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] bootstrap.cc:120 NCCL WARN Bootstrap Root : mismatch in rank count from "
                             "procs 8 : 16\n")),
            "store.rendezvous_timeout");
  // Without the warning line, the first "file:line -> result" trace names where the error began (a hint only).
  Explanation trace = ExplainLog("h:1:2 [0] NCCL INFO misc/shmutils.cc:88 -> 2\n"
                                 "h:1:2 [0] NCCL INFO transport/shm.cc:551 -> 2\n"
                                 "h:1:2 [0] NCCL INFO misc/socket.cc:28 -> 3\n");
  EXPECT_EQ(Claim(trace), "shm.space");
  EXPECT_EQ(trace.Best()->confidence, Confidence::kLow);
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] NCCL INFO misc/socket.cc:749 -> 6\n"
                             "h:1:2 [0] NCCL INFO transport/net.cc:288 -> 6\n")),
            "socket.peer_closed");
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on "
                             "CUDA device 1000\n"
                             "h:1:2 [0] NCCL INFO misc/shmutils.cc:88 -> 2\n")),
            "gpu.duplicate");
  // NVIDIA/nccl#957: before 2.19 ncclTransportP2pSetup could fail with 'invalid argument'.
  EXPECT_EQ(Claim(ExplainLog("h:1:2 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'\n")), "nccl.bug");
  EXPECT_EQ(Claim(ExplainLog("NCCL version 2.21.5+cuda12.4\n"
                             "h:1:2 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'\n")),
            "none");
  // aws/aws-ofi-nccl#584: NCCL 2.19+ on an old EFA libfabric cannot register CUDA buffers; not before 2.19.
  const std::string ofi_reg = "h:1:2 [0] register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = "
                              "2) for device 3. RC: -22, Error: Invalid argument\n";
  EXPECT_EQ(Claim(ExplainLog(ofi_reg)), "nccl.bug");
  EXPECT_EQ(Claim(ExplainLog("NCCL version 2.20.3+cuda12.3\n" + ofi_reg)), "nccl.bug");
  EXPECT_NE(Claim(ExplainLog("NCCL version 2.18.5+cuda12.2\n" + ofi_reg)), "nccl.bug");
}

TEST(ExplainTest, TransportsInterfacesAndJsonPrefixes) {
  const char* log =
      "a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n"
      "a:1:1 [0] NCCL INFO Using network IB\n"
      "2024-01-02T03:04:05.123Z a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n"
      "{\"time\": 1, \"rank\": 3, \"message\": \"b:1:2 [3] NCCL INFO Channel 00 : 3[0] -> 4[0] [send] via NET/IB/0\"}\n";
  Explanation ex = ExplainLog(log);
  EXPECT_EQ(ex.facts.transports, (std::vector<std::string>{"IB", "P2P"}));
  EXPECT_EQ(ex.facts.interfaces, std::vector<std::string>{"eth0"});
  EXPECT_EQ(ex.facts.hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ex.facts.cuda_devices, (std::vector<int>{0, 3}));
  EXPECT_EQ(ex.Best(), nullptr);
}

TEST(ExplainTest, SeveralLogsFindTheRankThatDiverged) {
  auto watchdog = [](int rank, int seq) {
    return "[E ProcessGroupNCCL.cpp:607] [Rank " + std::to_string(rank) +
           "] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" + std::to_string(seq) +
           ", OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 milliseconds\n";
  };
  std::vector<LogInput> logs = {
      {"rank0.log", "h0:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + watchdog(0, 100)},
      {"rank1.log", "h1:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + watchdog(1, 97)},
      {"rank2.log", "h2:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + watchdog(2, 100)},
  };
  Explanation ex = ExplainLogs(logs);
  EXPECT_EQ(Claim(ex), "collective.mismatch");
  ASSERT_FALSE(ex.divergences.empty());
  EXPECT_EQ(ex.divergences.front().kind, "stopped_earlier");
  EXPECT_NE(ex.divergences.front().source.find("rank 1"), std::string::npos);
  EXPECT_NE(ex.divergences.front().source.find("rank1.log"), std::string::npos);
  EXPECT_EQ(ex.sources.size(), 3u);

  // Different NCCL versions across hosts.
  logs[1].text = "h1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.2\n" + watchdog(1, 100);
  Explanation v = ExplainLogs(logs);
  EXPECT_EQ(Claim(v), "nccl.version_mismatch");
  bool flagged = false;
  for (const Divergence& d : v.divergences) flagged |= d.kind == "nccl_version" && d.source == "rank1.log";
  EXPECT_TRUE(flagged) << v.ToText();

  // One rank has its own error; the others only lost their peer.
  std::vector<LogInput> died = {
      {"r0.log", "h0:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer h1<5>\n"},
      {"r1.log", "h1:1:2 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"},
      {"r2.log", "h2:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer h1<5>\n"},
  };
  Explanation d = ExplainLogs(died);
  EXPECT_EQ(Claim(d), "cuda.oom");
  bool first = false;
  for (const Divergence& x : d.divergences) first |= x.kind == "died_first" && x.source == "r1.log";
  EXPECT_TRUE(first) << d.ToText();
  EXPECT_EQ(d.Best()->evidence.front().source, "r1.log");
}

TEST(ExplainTest, CatalogMatchesFormatsWithTypedCaptures) {
  explain::MessageCatalog cat(
      "# source nccl: 2.4.2 .. 2.28.9\n"
      "nccl:1\tnccl\tWARN\tib_completion\t2.4.2..2.9.9\tsrc/transport/net_ib.cc\tncclSystemError\tNET/IB : Got "
      "completion with error %d, opcode %d, len %d, vendor err %d\n"
      "nccl:2\tnccl\tWARN\tdup_gpu\t2.8.4..2.28.9\tsrc/init.cc\tncclInvalidUsage\tDuplicate GPU detected : rank %d and "
      "rank %d both on CUDA device %lx\n");
  EXPECT_EQ(cat.size(), 2u);
  explain::CatalogMatch m = cat.Match("NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129");
  ASSERT_NE(m.entry, nullptr);
  EXPECT_EQ(m.entry->id, "nccl:1");
  EXPECT_EQ(m.captures, (std::vector<std::string>{"12", "1", "0", "129"}));
  // A typed capture refuses text of the wrong kind.
  EXPECT_EQ(cat.Match("NET/IB : Got completion with error twelve, opcode 1, len 0, vendor err 129").entry, nullptr);
  m = cat.Match("prefix Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000");
  ASSERT_NE(m.entry, nullptr);
  EXPECT_EQ(m.captures, (std::vector<std::string>{"0", "1", "2000"}));
  // The embedded catalog holds every source the generator reads.
  const explain::MessageCatalog& real = explain::MessageCatalog::Get();
  EXPECT_GT(real.size(), 2000u);
  std::string notes;
  for (const std::string& s : real.sources()) notes += s + "\n";
  for (const char* src : {"nccl:", "aws-ofi-nccl:", "libfabric:", "ibverbs:", "cudart:", "pytorch:"})
    EXPECT_NE(notes.find(src), std::string::npos) << src;
  EXPECT_NE(real.Match("NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=1 len=0 vendor err 129 (Recv)")
                .entry,
            nullptr);
}

TEST(ExplainTest, HostileInputDoesNotCrashOrStall) {
  std::string junk(50000, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 131) % 256);
  Explanation ex = ExplainLog(junk);
  EXPECT_TRUE(nlohmann::json::accept(ex.ToJson()));
  (void)ex.ToText();
  // One 100 KB line (std::regex recursed to death on 27 KB), a JSON-looking line nested deeply, and a
  // line of catalog anchors: all bounded.
  std::string longline(100 * 1024, 'a');
  longline += " Error while creating shared memory segment x (size 1), error: No space left on device (28)\n";
  EXPECT_NO_FATAL_FAILURE((void)ExplainLog(longline));
  std::string nested(200000, '{');
  nested += "}\n";
  (void)ExplainLog(nested);
  std::string anchors;
  for (int i = 0; i < 3000; ++i) anchors += "NET/IB : Got completion with error ";
  (void)ExplainLog(anchors);
  // Lines are cut at kMaxExplainLineBytes in the evidence.
  Explanation shm = ExplainLog(std::string(10, 'x') + " failed to extend /dev/shm/x: No space left on device" +
                               std::string(200000, 'y'));
  ASSERT_NE(shm.Best(), nullptr);
  EXPECT_LE(shm.Best()->evidence.front().text.size(), kMaxExplainLineBytes);
  // Linear time: 16x the input takes well under 64x the time (a backtracking matcher was quadratic).
  std::string unit;
  for (int i = 0; i < 200; ++i)
    unit += "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC Error while " + std::to_string(i) + "\n";
  std::string big;
  for (int i = 0; i < 16; ++i) big += unit;
  auto time = [](const std::string& text) {
    auto t0 = std::chrono::steady_clock::now();
    (void)ExplainLog(text);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double small_s = std::max(time(unit), 1e-4);
  double big_s = time(big);
  EXPECT_LT(big_s, 64 * small_s + 1.0);
}

TEST(ExplainTest, LoadRefusesDirectoriesDevicesAndFifos) {
  testing::TempDir dir;
  std::istringstream no_stdin;
  auto d = LoadExplainInputs({dir.path().string()}, no_stdin);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("directory"), std::string::npos) << d.status().ToString();
  auto z = LoadExplainInputs({"/dev/zero"}, no_stdin);
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("character device"), std::string::npos);
  std::string fifo = (dir.path() / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = LoadExplainInputs({fifo}, no_stdin);  // must not block waiting for a writer
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("FIFO"), std::string::npos);
  EXPECT_FALSE(LoadExplainInputs({(dir.path() / "missing.log").string()}, no_stdin).ok());
}

TEST(ExplainTest, LoadSeparatesFlightRecorderDocuments) {
  testing::TempDir dir;
  auto log = dir.Write("rank0.log", "h:1:2 [0] NCCL WARN Call to ibv_create_qp failed\n");
  auto fr = dir.Write("rank0.json", "{\"commkit_flight_recorder\": {\"rank\": 0}, \"entries\": []}\n");
  auto other_json = dir.Write("x.json", "{\"message\": \"not a dump\"}\n");
  std::istringstream in("h:1:2 [0] NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000\n");
  auto r = LoadExplainInputs({log.string(), fr.string(), other_json.string(), "-"}, in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().flight_records.size(), 1u);
  EXPECT_EQ(r.value().flight_records[0].name, fr.string());
  ASSERT_EQ(r.value().logs.size(), 3u);
  EXPECT_EQ(r.value().logs[2].name, "<stdin>");
  EXPECT_EQ(Claim(ExplainLogs(r.value().logs)), "gpu.duplicate");
}

}  // namespace
}  // namespace commkit::diagnostics
