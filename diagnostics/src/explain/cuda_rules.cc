// Rules for CUDA and the GPUs: driver older than the runtime, no / invalid device, system not ready,
// out of GPU memory, faults NCCL only reports, two ranks on one GPU, peer access, NVLS.
#include <string>

#include "commkit/common/strings.h"
#include "error_codes.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

std::string Capture(const Message& m, std::size_t i) {
  return i < m.match.captures.size() ? m.match.captures[i] : std::string();
}

}  // namespace

void CudaRules(LineState& state, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  const std::string& topic = v.topic;
  bool& earlier_cuda_failure = state.earlier_cuda_failure;
  // --- CUDA
  if (Any(l, {"driver version is insufficient", "cudaerrorinsufficientdriver", "driver is too old",
              "nvidia driver on your system is too old"}))
    c.Hit("cuda.driver_too_old", 95, true, "The CUDA driver is older than the CUDA runtime the program / NCCL was "
          "built for", &m);
  if (Contains(l, "api call is not supported in the installed cuda driver") ||
      Contains(l, "cudaerrorcallrequiresnewerdriver"))
    c.Hit("cuda.driver_too_old", 58, false, "The installed CUDA driver lacks an API the program / NCCL calls (built "
          "for a newer CUDA)", &m);
  // NVML's NVML_ERROR_LIB_RM_VERSION_MISMATCH, the kernel module's own complaint (NVRM) and CUDA's 803 all say
  // the user-space driver and the loaded kernel module differ: a driver upgraded without a reboot, or a
  // container that brings its own libcuda / compat libraries.
  if (Any(l, {"driver/library version mismatch", "unsupported display driver / cuda driver combination",
              "cuda_error_system_driver_mismatch", "lib_rm_version_mismatch"}) ||
      (Contains(l, "nvrm") && Any(l, {"api mismatch", "this kernel module has the version"})))
    c.Hit("driver.mismatch", 94, true, "The NVIDIA kernel module and the user-space driver libraries are different "
          "versions (driver upgraded without a reboot, or libcuda / libnvidia-ml from another driver on the "
          "library path)", &m);
  if (Any(l, {"forward compatibility was attempted",
              "cudaerrorcompatnotsupportedondevice", "ptx was compiled with an unsupported toolchain",
              "cudaerrorunsupportedptxversion"}))
    c.Hit("cuda.driver_too_old", 70, false, "The driver is older than the CUDA the code was built with (forward "
          "compatibility not available on this GPU / driver, or PTX from a newer toolchain)", &m);
  if (Any(l, {"no cuda-capable device", "invalid device ordinal", "cudaerrornodevice", "cudaerrorinvaliddevice",
              "no cuda gpus are available", "found no nvidia driver", "no gpus found"})) {
    // After another CUDA failure, a missing device is usually its consequence, not the cause. The
    // framework's "no CUDA GPUs are available" / "found no NVIDIA driver" also follow a broken driver
    // install, so only CUDA's own device errors prove the family.
    bool cuda_says = Any(l, {"no cuda-capable device", "invalid device ordinal", "cudaerrornodevice",
                             "cudaerrorinvaliddevice"});
    if (earlier_cuda_failure)
      c.Hit("cuda.no_device", 52, false, "A CUDA call reported no / an invalid device after an earlier CUDA failure",
            &m);
    else
      c.Hit("cuda.no_device", cuda_says ? 90 : 78, cuda_says, "The process sees no (or not the requested) CUDA device",
            &m);
  }
  if (Any(l, {"cuda failure", "cuda error", "cudaerror"}) && !Any(l, {"device ordinal", "cuda-capable"}))
    earlier_cuda_failure = true;
  // cudaErrorDevicesUnavailable in the runtime's older wording ("all CUDA-capable devices are busy or
  // unavailable"), which the catalog's current string does not match: the code's own meaning.
  if (Contains(l, "busy or unavailable") && Any(l, {"cuda", "device"})) {
    const CudaCodeMeaning& busy = *CudaCode(46);
    c.Hit(busy.family, busy.score, busy.provable, busy.cause, &m);
  }
  // NVML answers "Unknown Error" when the device nodes it opens are refused: a container whose cgroup device
  // rules systemd rewrote under it (daemon-reload; runc needs /dev/char links for the NVIDIA nodes) loses its
  // GPUs until it is recreated.
  if (Contains(l, "failed to initialize nvml: unknown error"))
    c.Hit("cuda.no_device", 70, false, "NVML cannot open the GPU device nodes: in a container, usually its cgroup "
          "device rules rewritten by a systemd reload (recreate the container; on the host run nvidia-ctk system "
          "create-dev-char-symlinks --create-all so it does not recur)", &m);
  if (Any(l, {"system not yet initialized", "cudaerrorsystemnotready", "error 802"}))
    c.Hit("cuda.system_not_ready", 75, false, "CUDA reports the system is not ready (cudaErrorSystemNotReady 802): "
          "on NVSwitch systems nvidia-fabricmanager is usually not running", &m);
  // Slurm reports a step's memory cgroup OOM as "task N: Out Of Memory" on a node often named gpu-*.
  if (Contains(l, "out of memory") && Any(l, {"cuda", "cumem", "gpu"}) &&
      !Any(l, {"killed process", "oom_kill", "oom-kill", "srun: error", "slurmstepd"}))
    c.Hit("cuda.oom", 76, false, "A CUDA allocation (NCCL buffers or the framework's) ran out of GPU memory", &m);
  if (Any(l, {"illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
              "illegal instruction was encountered",
              "uncorrectable ecc", " xid "}))
    c.Hit("cuda.illegal_access", Contains(l, "illegal memory access") ? 74 : 62, false,
          "A GPU kernel faulted (illegal memory access / Xid); NCCL only reports it", &m);
  // NCCL's own check, and PyTorch's before it reaches NCCL ("Duplicated GPU device is not allowed by
  // NCCL. Rank [0] and rank [8] both attached to GPU device 0 on the same host").
  if (Any(l, {"duplicate gpu detected", "duplicated gpu device", "both attached to gpu device"})) {
    std::string cause = "Two ranks use the same GPU";
    if (m.match.entry != nullptr && m.match.captures.size() >= 3)
      cause += " (ranks " + Capture(m, 0) + " and " + Capture(m, 1) + " on CUDA device " + Capture(m, 2) + ")";
    c.Hit("gpu.duplicate", 98, true, cause + ": the device is not set per local rank, or more processes than GPUs",
          &m);
  }
  if (Any(l, {"peer access is not supported", "cudaerrorpeeraccessunsupported", "p2p is not supported",
              "failed to enable peer access", "peer access unsupported"}) ||
      (Contains(l, "217") && Contains(l, "peer")))
    c.Hit("p2p.unsupported", 68, false, "CUDA peer access (P2P / IPC) is not supported between these GPUs but a P2P "
          "path was used", &m);
  else if (Contains(l, "peer access device") && Contains(l, "not available"))
    c.Hit("p2p.unsupported", 35, false, "The GPUs report no peer access (harmless unless a P2P-only path is used)",
          &m);
  if (Any(l, {"nvls", "nvlink sharp", "multicast"}) || topic == "nvls")
    c.Hit("nvls.fabricmanager", 75, false, "NVLS (NVLink SHARP multicast) setup failed; the known cause is "
          "nvidia-fabricmanager restarted without resetting the GPUs", &m);

}

}  // namespace commkit::diagnostics::explain
