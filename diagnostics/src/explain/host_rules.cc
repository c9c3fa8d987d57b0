// Rules for what one machine provides: NCCL's /dev/shm segments, the topology XML NCCL reads, host
// memory (the kernel's OOM killer).
#include <string>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

void ShmRules(const LogContext& log, LineState& state, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  const std::string& topic = v.topic;
  bool& shm_cuda_failure = state.shm_cuda_failure;
  bool enospc_anywhere = log.enospc_anywhere, access_denied_anywhere = log.access_denied_anywhere,
       bus_error_anywhere = log.bus_error_anywhere;
  // --- shared memory
  bool shm = Any(l, {"/dev/shm", "shared memory", "shm", "posix_fallocate", "fallocate", "failed to extend"}) ||
             topic == "shm";
  if (shm) {
    if (Any(l, {"no space left on device", "enospc", "error 28", "(28)"}))
      c.Hit("shm.space", 95, true, "/dev/shm is full or too small: NCCL's shared-memory segment could not be "
            "allocated (ENOSPC)", &m);
    else if (bus_error_anywhere && !Any(l, {"permission denied", "operation not permitted"}))
      c.Hit("shm.space", 74, false, "A bus error (SIGBUS) inside NCCL's shared-memory code: /dev/shm ran out of "
            "space while the mapped segment was being touched (tmpfs allocates pages on first use)", &m);
    else if (Any(l, {"permission denied", "operation not permitted", "read-only file system"}) ||
             (!enospc_anywhere && Contains(l, "creating shared memory") && access_denied_anywhere))
      c.Hit("shm.other", 74, false, "An NCCL /dev/shm segment could not be created or opened: permission denied "
            "(mode / ownership of /dev/shm, or a read-only mount)", &m);
    else if (Contains(l, "cuda failure") || (shm_cuda_failure && Contains(l, "creating shared memory"))) {
      shm_cuda_failure = true;
      c.Hit("shm.other", 50, false, "Registering NCCL's /dev/shm segment with CUDA failed (cudaHostRegister); not a "
            "space error", &m);
    } else if (Any(l, {"error while creating shared memory", "failed to create shared memory", "unable to allocate "
                     "shared memory", "failed to extend", "posix_fallocate failed", "shm_open"}))
      c.Hit("shm.space", enospc_anywhere ? 92 : 72, enospc_anywhere,
            "Creating NCCL's /dev/shm segment failed; by far the usual cause is a /dev/shm too small for the "
            "segments (container default 64 MB)", &m);
    else if (Any(l, {"attach", "open", "unlink", "cuda failure", "mmap", "shm"}))
      c.Hit("shm.other", 40, false, "An NCCL shared-memory operation failed (not a space error)", &m);
  }

  // A process killed by SIGBUS with no shared-memory line to place it: a tmpfs that ran out of pages while a
  // mapped segment was being touched raises SIGBUS, so a full /dev/shm is the usual suspect (a hint only).
  if (!shm && Any(l, {"sigbus", "bus error"}) && !Contains(l, "insufficient shared memory"))
    c.Hit("shm.space", 40, false, "A process died of SIGBUS: in containers usually a /dev/shm too small for the "
          "shared-memory segments mapped by NCCL or the data loader", &m);
  if (Contains(l, "insufficient shared memory"))
    c.Hit("shm.space", 78, false, "A process reports insufficient shared memory (/dev/shm) - PyTorch's own "
          "diagnosis of a bus error in a worker", &m);

}

void TopoRules(const LogContext& log, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  bool err = v.err;
  const LogFacts& f = log.facts;
  // --- topology
  if ((Contains(l, "attribute ") && Contains(l, " of node ")) ||
      (Any(l, {"nccl_topo_file", "topology file", "topo file", "xml"}) && err))
    c.Hit("topo.file", f.env.count("NCCL_TOPO_FILE") ? 74 : 68, false,
          "NCCL's topology XML (NCCL_TOPO_FILE or a plugin-injected file) does not describe this machine", &m);

}

void HostRules(const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  // --- host
  if (Any(l, {"out of memory: killed process", "oom-kill", "oom_kill", "oom killer"}))
    c.Hit("host.oom", 90, true, "The kernel's OOM killer killed a rank", &m);
  // Ray's memory monitor kills a worker itself before the kernel would, and says why.
  else if (Any(l, {"node running low on memory", "ray killed this worker", "ray.exceptions.outofmemoryerror"}))
    c.Hit("host.oom", 86, true, "Ray's memory monitor killed a worker: the node ran low on host memory", &m);
  else if (Contains(l, "killed process"))
    c.Hit("host.oom", 60, false, "A process was killed (the wording of the kernel's OOM killer, without the OOM "
          "line)", &m);
  // DeepSpeed's launcher names its teardown of the other ranks "sigkill_handler": that is the launcher
  // reacting to a failure, not the failure.
  else if (Any(l, {"signal 9 (sigkill)", "exitcode: -9", "sigkill", "exit code 137", "exit status 137",
                    "return code = -9", "return code -9", "returncode=-9", "returncode: -9", "exit code -9",
                    "exit_code: -9", "killed by signal 9", "on signal 9 (killed)"}) &&
           !Contains(l, "sigkill_handler"))
    c.Hit("host.oom", 55, false, "A rank was killed with SIGKILL (usually the host OOM killer)", &m);
}

}  // namespace commkit::diagnostics::explain
