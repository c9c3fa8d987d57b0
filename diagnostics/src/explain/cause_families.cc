#include "cause_families.h"

namespace commkit::diagnostics::explain {

namespace {

// Fixes and sources per cause family (ids shared with the labelled corpus; see docs/gpudoctor.md).
const Family kFamilies[] = {
    {"shm.space",
     "Enlarge /dev/shm: docker --shm-size=1g (or --ipc=host); Kubernetes: an emptyDir {medium: Memory} volume mounted at "
     "/dev/shm; free stale /dev/shm/nccl-* files. Workaround: NCCL_SHM_DISABLE=1 (slower intra-node path)",
     "df -h /dev/shm (inside the container/pod); gpudoctor --only env.shm",
     "NCCL troubleshooting guide, 'Docker' / shared memory (docs.nvidia.com/deeplearning/nccl/user-guide/docs/"
     "troubleshooting.html); pytorch/ci-infra#490 (settled: emptyDir medium Memory)"},
    {"shm.other",
     "Make all local ranks share one /dev/shm (same container, --ipc=host); try another NCCL release; workaround "
     "NCCL_SHM_DISABLE=1",
     "df -h /dev/shm; ls -la /dev/shm/nccl-*; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,SHM",
     "NCCL environment variables: NCCL_SHM_DISABLE (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)"},
    {"socket.ifname_missing",
     "Set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to an interface that exists and has an address on every node "
     "(e.g. NCCL_SOCKET_IFNAME=eno1, or a prefix list / ^docker,lo exclusion), or unset it",
     "ip -br addr (on each node); gpudoctor --only env.nccl",
     "NCCL env docs, NCCL_SOCKET_IFNAME; pytorch/pytorch threads where naming an existing interface fixed "
     "'no socket interface found' / the garbage address family"},
    {"socket.wrong_interface",
     "Point NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) at the interface the nodes route between, or exclude virtual "
     "ones: NCCL_SOCKET_IFNAME=^docker,lo,veth,virbr",
     "ip -br addr; ip route get <peer ip>; gpudoctor cluster (pairwise reachability)",
     "NCCL env docs, NCCL_SOCKET_IFNAME (default excludes docker*/lo only)"},
    {"socket.unreachable",
     "Open the ports between nodes (firewall / security group: all TCP between the job's nodes, or NCCL_PORT_RANGE / "
     "MASTER_PORT), check MASTER_ADDR resolves to a reachable address on every node",
     "nc -l <port> on one node and nc <ip> <port> from the other; gpudoctor cluster",
     "NVIDIA/nccl-tests#162 (maintainer: firewall / nc connectivity test)"},
    {"socket.peer_closed",
     "Find the rank that failed first: its own log carries the real error (this rank only saw the connection drop)",
     "gpudoctor explain rank*.log (all ranks' logs together)",
     "NCCL troubleshooting guide: 'remote process exited or there was a network error' is reported by the survivor"},
    {"store.rendezvous_timeout",
     "Make every rank reach init: same MASTER_ADDR/MASTER_PORT and WORLD_SIZE on all nodes, the master reachable on "
     "that port, no rank crashing before init; raise the timeout only if ranks are merely slow",
     "check each rank's log for an earlier error; nc -vz $MASTER_ADDR $MASTER_PORT from every node",
     "PyTorch distributed docs (init_process_group, TCPStore timeout)"},
    {"store.port_in_use",
     "Use a free MASTER_PORT (or --master_port / --main_process_port), or stop the earlier job still holding it",
     "ss -ltnp | grep <port>",
     "PyTorch forums / threads: TCPStore bind fails with EADDRINUSE when a previous run holds MASTER_PORT"},
    {"cuda.driver_too_old",
     "Install a driver that supports the CUDA version the framework / NCCL was built for (or use the CUDA forward-"
     "compat package on datacenter GPUs, or a build for the older CUDA)",
     "nvidia-smi (driver's CUDA version) vs the runtime's (python -c 'import torch; print(torch.version.cuda)')",
     "CUDA runtime API: cudaErrorInsufficientDriver (35); CUDA compatibility guide"},
    {"driver.mismatch",
     "The NVIDIA kernel module and the user-space driver (libcuda, libnvidia-ml) are different versions. After a "
     "driver upgrade: reboot, or reload the modules with nothing using the GPUs (systemctl stop nvidia-persistenced "
     "nvidia-fabricmanager; rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; nvidia-smi), and hold the driver "
     "packages against unattended upgrades (apt-mark hold). In a container: do not ship libcuda / libnvidia-ml or a "
     "CUDA compat directory older than the host driver on LD_LIBRARY_PATH; let the NVIDIA container toolkit mount "
     "the host's",
     "cat /proc/driver/nvidia/version (kernel module) against the library (ls -l $(ldconfig -p | grep -o "
     "'/.*libnvidia-ml.so.1'); echo $LD_LIBRARY_PATH); dmesg | grep NVRM; gpudoctor --only gpu",
     "NVML nvmlInit: NVML_ERROR_LIB_RM_VERSION_MISMATCH; CUDA driver API: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803); "
     "NVIDIA/nvidia-container-toolkit#394 and oddmario/NVIDIA-Ubuntu-Driver-Guide#4 (settled: kernel module older "
     "than the upgraded packages, fixed by a reboot)"},
    {"cuda.no_device",
     "Check CUDA_VISIBLE_DEVICES and LOCAL_RANK -> device mapping, that the GPUs are passed into the container "
     "(--gpus all / nvidia runtime), and that the driver is loaded",
     "nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES; gpudoctor --only gpu",
     "CUDA runtime API: cudaErrorNoDevice (100), cudaErrorInvalidDevice (101); NVIDIA/nvidia-container-toolkit#48 "
     "(containers losing their GPUs: NVML Unknown Error)"},
    {"cuda.system_not_ready",
     "On NVSwitch systems start nvidia-fabricmanager (same version as the driver): systemctl enable --now "
     "nvidia-fabricmanager",
     "systemctl status nvidia-fabricmanager; nvidia-smi -q | grep -i -A2 fabric",
     "CUDA runtime API: cudaErrorSystemNotReady (802); NVIDIA/nccl-tests#264 (fabric manager)"},
    {"cuda.oom",
     "Leave GPU memory for NCCL (lower the framework's memory fraction / batch size), check for other processes on the "
     "GPU, reduce NCCL buffers (NCCL_BUFFSIZE) or channels",
     "nvidia-smi (memory used, other processes)",
     "CUDA runtime API: cudaErrorMemoryAllocation (2)"},
    {"cuda.illegal_access",
     "A kernel faulted: run with CUDA_LAUNCH_BLOCKING=1 and compute-sanitizer to find it; check dmesg for Xid errors "
     "(hardware) and upgrade NCCL / the framework if a known bug",
     "dmesg -T | grep -i xid; compute-sanitizer python ...",
     "CUDA runtime API: cudaErrorIllegalAddress (700); NVIDIA Xid catalog"},
    {"gpu.duplicate",
     "Give each rank its own GPU: torch.cuda.set_device(LOCAL_RANK) before init, no hard-coded cuda:0, and no more "
     "processes per node than GPUs",
     "echo $LOCAL_RANK $CUDA_VISIBLE_DEVICES per rank; nvidia-smi -L",
     "NCCL: 'Duplicate GPU detected' is ncclInvalidUsage (init.cc); threads settled by setting the device per rank"},
    {"p2p.unsupported",
     "These GPUs have no peer access: NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL), disable features that need P2P "
     "(TensorRT-LLM / vLLM custom all-reduce); on bare metal check ACS/IOMMU settings",
     "nvidia-smi topo -p2p r; nvidia-smi topo -m",
     "CUDA runtime API: cudaErrorPeerAccessUnsupported (217); NCCL troubleshooting guide, PCI ACS"},
    {"nvls.fabricmanager",
     "Reset the GPUs / reboot after a fabric manager stop-start (Fabric Manager user guide), or disable NVLS with "
     "NCCL_NVLS_ENABLE=0",
     "systemctl status nvidia-fabricmanager; nvidia-smi -q | grep -i -A3 fabric",
     "NVIDIA/nccl#1488 (settled: fabric manager restarted without GPU reset)"},
    {"ib.memlock",
     "Raise the locked-memory limit for the job: ulimit -l unlimited (limits.conf memlock), Slurm "
     "PropagateResourceLimits / LimitMEMLOCK=infinity, docker --ulimit memlock=-1 (or --privileged for RDMA)",
     "ulimit -l (inside the job: srun bash -c 'ulimit -l'); gpudoctor --only env.memlock",
     "NCCL troubleshooting guide, 'InfiniBand' (memlock); NVIDIA/nccl#562"},
    {"ib.gid_index",
     "Use the RoCEv2 IPv4 GID: NCCL_IB_GID_INDEX=<index from show_gids> (often 3), or NCCL_IB_ADDR_FAMILY=AF_INET / "
     "NCCL_IB_ROCE_VERSION_NUM=2 with NCCL >= 2.21",
     "show_gids; ibv_devinfo -v | grep -i -e gid -e link_layer",
     "NCCL env docs, NCCL_IB_GID_INDEX / NCCL_IB_ADDR_FAMILY"},
    {"ib.completion_error",
     "Check the fabric: link errors and MTU (ibv_devinfo -v active_mtu on both ends, switch MTU), PCI ACS disabled on "
     "the GPU/NIC path, RoCE PFC/ECN; run the IB tests between the two hosts",
     "ibv_devinfo -v; ib_write_bw between the two hosts; perfquery / ethtool -S <if> | grep -i err; lspci -vvv | "
     "grep -i acsctl",
     "NCCL troubleshooting guide, 'PCI Access Control Services (ACS)' and InfiniBand errors; ibv_wc_status_str"},
    {"ib.no_device",
     "Expose the RDMA devices (/dev/infiniband) to the job/container, check NCCL_IB_HCA names existing devices, load "
     "the net plugin that matches (NCCL_NET_PLUGIN)",
     "ibv_devices; ls /dev/infiniband; gpudoctor --only net.ib",
     "NCCL env docs, NCCL_IB_HCA / NCCL_NET_PLUGIN"},
    {"ib.gdr",
     "Load nvidia_peermem (modprobe nvidia_peermem) or use DMA-BUF (NCCL_DMABUF_ENABLE=1, kernel >= 5.12); NCCL <= "
     "2.22.3 only detects the old nv_peer_mem module",
     "lsmod | grep -e peermem -e nv_peer; gpudoctor --only gpu.gdr",
     "NVIDIA/nccl#1676 (settled: nvidia_peermem not detected by NCCL <= 2.22.3)"},
    {"efa.provider",
     "Install the EFA software (libfabric with the efa provider) and the aws-ofi-nccl plugin, and pass the EFA devices "
     "(/dev/infiniband/uverbs*) into the container",
     "fi_info -p efa; ls /dev/infiniband; gpudoctor --only net.efa",
     "aws-ofi-nccl README / issues #1020 (fi_getinfo empty when /dev/infiniband is not in the container)"},
    {"topo.file",
     "Unset NCCL_TOPO_FILE or give the file matching this machine (aws-ofi-nccl >= 1.11 generates it); upgrade NCCL if "
     "it cannot parse the file",
     "echo $NCCL_TOPO_FILE; NCCL_TOPO_DUMP_FILE=/tmp/topo.xml to compare",
     "aws/aws-ofi-nccl#785 (maintainer: static topology file lacks CPU attributes)"},
    {"nccl.version_mismatch",
     "Use one NCCL version on every node (same container image / wheel); check LD_LIBRARY_PATH for a second libnccl",
     "NCCL_DEBUG=VERSION on every node; gpudoctor --only nccl.libraries",
     "NVIDIA/nccl#1267 (mixed 2.17/2.19/2.20 across nodes); pytorch/pytorch#119932 (undefined symbol "
     "ncclCommRegister: another package's older libnccl loaded)"},
    {"nccl.bug", "Upgrade NCCL to the latest release (see its release notes for the fix)",
     "NCCL_DEBUG=INFO on the failing rank; compare with the NCCL release notes", "NCCL release notes"},
    {"collective.mismatch",
     "Ranks issued different collectives (order, op or size): make every rank call the same collectives in the same "
     "order (rank-dependent branches, uneven data, skipped steps)",
     "TORCH_DISTRIBUTED_DEBUG=DETAIL (collective fingerprints); TORCH_NCCL_TRACE_BUFFER_SIZE=20000 "
     "TORCH_NCCL_DUMP_ON_TIMEOUT=1 then compare flight-recorder dumps",
     "PyTorch docs: TORCH_DISTRIBUTED_DEBUG=DETAIL collective desync detection; flight recorder"},
    {"collective.timeout",
     "A rank is slow, stuck or dead inside a collective: find it (the rank that did not reach this SeqNum, or the one "
     "whose log ends early), then its cause (data loader, deadlock, crash); raise the timeout only for slow steps",
     "TORCH_NCCL_TRACE_BUFFER_SIZE=20000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 (flight recorder), py-spy dump on the hung "
     "ranks, NCCL_DEBUG=INFO",
     "PyTorch ProcessGroupNCCL watchdog docs; flight recorder tutorial"},
    {"nccl.nonblocking_usage",
     "With a nonblocking communicator (ncclConfig_t.blocking = 0; PyTorch: TORCH_NCCL_USE_COMM_NONBLOCKING=1 or "
     "eager init with device_id) poll ncclCommGetAsyncError until it returns ncclSuccess after every init, split "
     "and group before the next call; ncclCommSplit fills the new handle only when the split completes. If an "
     "earlier NCCL error is in the log, fix that one: this line is its echo",
     "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT; rerun with TORCH_NCCL_USE_COMM_NONBLOCKING=0 (blocking) to compare",
     "NCCL user guide, 'Fault tolerance' (nonblocking communicators and ncclCommGetAsyncError); NVIDIA/nccl#1734; "
     "commkit docs/gpu-validation.md (ncclCommSplit on 2.28 stores the handle when the split completes)"},
    {"host.oom",
     "The host ran out of memory and the kernel killed a rank: reduce host memory use (data loader workers, pinned "
     "memory) or give the job more memory (container / Slurm --mem)",
     "dmesg -T | grep -i -e oom -e 'killed process'; free -g", "Linux OOM killer (SIGKILL, exit code -9 / 137)"},
};

}  // namespace

bool Provable(std::string_view id) {
  for (std::string_view p : {"shm.space", "socket.ifname_missing", "store.port_in_use", "cuda.driver_too_old",
                             "driver.mismatch", "cuda.no_device", "gpu.duplicate", "ib.memlock", "nccl.version_mismatch",
                             "collective.mismatch", "host.oom"})
    if (id == p) return true;
  return false;
}

const Family* FindFamily(std::string_view id) {
  for (const Family& f : kFamilies)
    if (id == f.id) return &f;
  return nullptr;
}

}  // namespace commkit::diagnostics::explain
