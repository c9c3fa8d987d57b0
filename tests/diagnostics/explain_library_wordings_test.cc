// gpudoctor explain: what the libraries and tools around NCCL print, each in its own wording and next to
// the case it must not claim: NVML, the NVIDIA kernel module and CUDA on a driver whose parts differ in
// version, Gloo's tcp device looking up where to listen, and launchers, schedulers and Ray reporting a
// killed rank; the loader, the container runtime and NCCL's connect retries.
#include <gtest/gtest.h>

#include <string>

#include "commkit/diagnostics/explain.h"
#include "explain_test_support.h"

namespace commkit::diagnostics {
namespace {

// The kernel module and the user-space driver at different versions, in the words of NVML, the kernel
// module and CUDA (803); a driver merely older than the runtime stays cuda.driver_too_old.
TEST(ExplainTest, DriverLibraryMismatch) {
  EXPECT_EQ(HighClaim(ExplainLog("$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"
                                 "NVML library version: 550.107\n")),
            "driver.mismatch");
  EXPECT_EQ(HighClaim(ExplainLog("docker: Error response from daemon: failed to create task for container: "
                                 "nvidia-container-cli: initialization error: nvml error: driver/library version "
                                 "mismatch: unknown.\n")),
            "driver.mismatch");
  EXPECT_EQ(HighClaim(ExplainLog("[ 9.1] NVRM: API mismatch: the client has the version 535.129.03, but\n"
                                 "[ 9.1] NVRM: this kernel module has the version 535.104.05.  Please\n")),
            "driver.mismatch");
  EXPECT_EQ(HighClaim(ExplainLog("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has "
                                 "unsupported display driver / cuda driver combination\n")),
            "driver.mismatch");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error code=803(cudaErrorSystemDriverMismatch)\n")), "driver.mismatch");
  // PyTorch's NCCL process group in a process that sees no GPU is the no-device family, not this one.
  EXPECT_EQ(HighClaim(ExplainLog("RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!\n")),
            "cuda.no_device (medium)");
  EXPECT_EQ(Claim(ExplainLog("RuntimeError: CUDA error: forward compatibility was attempted on non supported HW\n")),
            "cuda.driver_too_old");
  // Versions that merely differ between ranks are another family.
  EXPECT_NE(Claim(ExplainLog("h:1:1 [0] NCCL WARN Mismatched NCCL version detected : rank 0 version 21803 rank 1 "
                             "version 21903\n")),
            "driver.mismatch");
}

// Gloo's tcp device fails differently for each way it was told where to listen: an interface
// (GLOO_SOCKET_IFNAME) without an address, a hostname that does not resolve or resolves to another
// host's address, an address no interface has.
TEST(ExplainTest, GlooAddressLookups) {
  const std::string at = "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ";
  Explanation iface = ExplainLog(at + "ifa != nullptr. Unable to find address for: eth9\n");
  EXPECT_EQ(HighClaim(iface), "socket.ifname_missing");
  EXPECT_NE(iface.Best()->cause.find("'eth9'"), std::string::npos) << iface.Best()->cause;
  // A short hostname is not an interface, unless the log set it as one.
  EXPECT_EQ(HighClaim(ExplainLog(at + "rp != nullptr. Unable to find address for: worker-3\n")),
            "socket.wrong_interface (medium)");
  EXPECT_EQ(HighClaim(ExplainLog("GLOO_SOCKET_IFNAME=mgmt\n" + at + "Unable to find address for: mgmt\n")),
            "socket.ifname_missing");
  Explanation bind = ExplainLog(
      "RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:130] Unable to find "
      "address for node7; bind(2) for 10.0.0.5 failed with: Cannot assign requested "
      "address\n");
  EXPECT_EQ(HighClaim(bind), "socket.wrong_interface (medium)");
  EXPECT_NE(bind.Best()->cause.find("not an address of this host"), std::string::npos) << bind.Best()->cause;
  EXPECT_EQ(HighClaim(ExplainLog(at + "ifa != nullptr. Unable to find interface for: [0.0.0.0]\n")),
            "socket.wrong_interface (medium)");
  // NCCL's selector syntax given to Gloo, which reads it as one interface name.
  Explanation selector = ExplainLog(at + "ifa != nullptr. Unable to find address for: ^lo\n");
  EXPECT_EQ(HighClaim(selector), "socket.ifname_missing");
  EXPECT_NE(selector.Best()->cause.find("selector syntax"), std::string::npos) << selector.Best()->cause;
  for (const char* host : {"localhost", "broker1.example.com", "node1"})
    EXPECT_EQ(Claim(ExplainLog(at + "Unable to find address for: " + host + "\n")), "socket.wrong_interface") << host;
}

// How launchers, schedulers and Ray report a rank the host's memory killed, and the launcher wording
// that is only teardown; a crash inside NCCL's code seen from its backtrace alone; the etcd rendezvous
// backend out of reach.
TEST(ExplainTest, KilledRanksAsLaunchersAndSchedulersReportThem) {
  EXPECT_EQ(HighClaim(ExplainLog("mpirun noticed that process rank 3 with PID 0 on node gpu-07 exited on signal 9 "
                                 "(Killed).\n")),
            "host.oom (medium)");
  // Slurm's memory cgroup on a node named gpu-*: the host's memory, not the GPU's.
  EXPECT_EQ(HighClaim(ExplainLog("slurmstepd: error: Detected 1 oom_kill event in StepId=123.0. Some of the step tasks "
                                 "have been OOM Killed.\nsrun: error: gpu-07: task 3: Out Of Memory\n")),
            "host.oom");
  EXPECT_EQ(HighClaim(ExplainLog("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                                 "memory.\n")),
            "host.oom");
  // DeepSpeed's launcher tears the other ranks down in its "sigkill_handler" after one failed.
  Explanation ds = ExplainLog(
      "[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=45, "
      "OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800724 milliseconds before timing out.\n"
      "[2023-05-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1234\n");
  EXPECT_EQ(Claim(ds), "collective.timeout");
  EXPECT_FALSE(Mentions(ds, "host.oom"));

  const std::string segv =
      "Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)\n"
      "==== backtrace (tid: 1234) ====\n";
  EXPECT_EQ(HighClaim(ExplainLog(segv + " 1 0x8d6a5 ncclProxyProgress()  /opt/nccl/src/proxy.cc:800\n")),
            "nccl.bug (low)");
  EXPECT_FALSE(Mentions(ExplainLog(segv + " 1 0x8d6a5 PyEval_EvalFrame()  ???:0\n"), "nccl.bug"));

  EXPECT_EQ(HighClaim(ExplainLog("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection "
                                 "to etcd has failed. See inner exception for details.\n")),
            "store.rendezvous_timeout (medium)");
}

// The dynamic loader and the container runtime: a libnccl older than the one the framework was linked
// against, a container that lost its GPU device nodes, NCCL giving up on connect retries.
TEST(ExplainTest, LoaderContainerAndConnectRetryWordings) {
  EXPECT_EQ(HighClaim(ExplainLog("ImportError: /opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: "
                                 "undefined symbol: ncclCommRegister\n")),
            "nccl.version_mismatch");
  // A missing symbol of another library is not NCCL's version.
  EXPECT_FALSE(Mentions(ExplainLog("ImportError: /opt/venv/lib/python3.10/site-packages/flash_attn_2_cuda.so: "
                                   "undefined symbol: _ZN3c104cuda9SetDeviceEi\n"),
                        "nccl.version_mismatch"));
  Explanation nvml = ExplainLog("root@pod-0:/# nvidia-smi\nFailed to initialize NVML: Unknown Error\n");
  EXPECT_EQ(HighClaim(nvml), "cuda.no_device (medium)");
  EXPECT_NE(nvml.Best()->cause.find("create-dev-char-symlinks"), std::string::npos) << nvml.Best()->cause;
  // The version mismatch wording of the same call stays its own family.
  EXPECT_EQ(Claim(ExplainLog("Failed to initialize NVML: Driver/library version mismatch\n")), "driver.mismatch");
  EXPECT_EQ(HighClaim(ExplainLog("node2:77:90 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: exceeded retries "
                                 "(20000)\n")),
            "socket.unreachable (medium)");
}

// c10d's monitored barrier: the ranks it names as missing are the stuck ones; a rank that got there but
// lost rank 0 sends the reader to rank 0's log.
TEST(ExplainTest, MonitoredBarrierWordings) {
  EXPECT_EQ(HighClaim(ExplainLog("RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 1800000 ms\n")),
            "collective.timeout (medium)");
  EXPECT_EQ(HighClaim(ExplainLog("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors "
                                 "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n")),
            "socket.peer_closed (medium)");
}

}  // namespace
}  // namespace commkit::diagnostics
