#include "causes.h"

#include <algorithm>
#include <map>

#include "candidates.h"
#include "cause_families.h"
#include "code_rules.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics::explain {

namespace {

// The decimal number at l[pos...], or -1.
long long NumAt(const std::string& l, std::size_t pos) {
  long long v = -1;
  for (std::size_t i = pos; i < l.size() && i < pos + 18 && l[i] >= '0' && l[i] <= '9'; ++i) v = (v < 0 ? 0 : v * 10) + (l[i] - '0');
  return v;
}

bool Any(const std::string& l, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (l.find(w) != std::string::npos) return true;
  return false;
}

// `w` as a whole word: short names such as "efa" or "ofi" are also parts of common words
// ("default_pg", "profile").
bool HasWord(const std::string& l, std::string_view w) {
  auto alnum = [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); };
  for (std::size_t at = l.find(w); at != std::string::npos; at = l.find(w, at + 1)) {
    bool left = at == 0 || !alnum(l[at - 1]);
    bool right = at + w.size() >= l.size() || !alnum(l[at + w.size()]);
    if (left && right) return true;
  }
  return false;
}

bool IsVirtualInterface(std::string_view n) {
  for (std::string_view p : {"docker", "veth", "virbr", "br-", "lo", "cni", "flannel", "cali", "tun", "vxlan"})
    if (n.rfind(p, 0) == 0 && !(p == "lo" && n.size() > 2 && n != "lo")) return true;
  return false;
}

// Does an NCCL_SOCKET_IFNAME value (prefix list, ^exclusions, =exact) name one of `ifs`?
bool IfnameMatchesAny(std::string value, const std::vector<std::string>& ifs) {
  if (value.empty() || value.front() == '^') return true;  // exclusion lists cannot be checked this way
  bool exact = value.front() == '=';
  if (exact) value.erase(0, 1);
  for (const std::string& want : Split(value, ',', true))
    for (const std::string& have : ifs)
      if (exact ? have == want : have.rfind(want, 0) == 0) return true;
  return false;
}

std::string Capture(const Message& m, std::size_t i) {
  return i < m.match.captures.size() ? m.match.captures[i] : std::string();
}

void MessageRules(const RuleContext& ctx, Candidates& c, bool store_ctx, bool efa_ctx) {
  const LogFacts& f = ctx.facts;
  bool single_host = f.hosts.size() <= 1 && f.interfaces.empty();
  bool single_host_log = f.hosts.size() <= 1 && ctx.names.size() <= 1 && f.ranks.size() <= 1;
  bool earlier_cuda_failure = false;
  bool shm_cuda_failure = false;
  auto env = [&](const char* k) {
    auto it = f.env.find(k);
    return it == f.env.end() ? std::string() : it->second;
  };
  std::string ifname = env("NCCL_SOCKET_IFNAME");
  if (ifname.empty()) ifname = env("GLOO_SOCKET_IFNAME");
  bool enospc_anywhere = std::find(f.errnos.begin(), f.errnos.end(), "ENOSPC") != f.errnos.end();
  bool access_denied_anywhere = std::find(f.errnos.begin(), f.errnos.end(), "EACCES") != f.errnos.end() ||
                                std::find(f.errnos.begin(), f.errnos.end(), "EPERM") != f.errnos.end();
  bool roce = std::find(f.link_layers.begin(), f.link_layers.end(), "RoCE") != f.link_layers.end();
  // tmpfs allocates pages when they are first touched, so a full /dev/shm shows up as SIGBUS inside the
  // shared-memory code rather than as ENOSPC.
  bool bus_error_anywhere = false;
  for (const Message& m : ctx.messages)
    if (Any(m.lower, {"sigbus", "bus error"})) bus_error_anywhere = true;

  for (const Message& m : ctx.messages) {
    const std::string& l = m.lower;
    const std::string topic = m.match.entry != nullptr ? m.match.entry->topic : std::string();
    bool err = LooksLikeError(m);
    // NCCL INFO lines only feed facts (they echo settings and list devices), except the few warnings
    // NCCL prints at INFO level.
    if (m.line->nccl_info && !err && !Any(l, {"gpu direct rdma disabled", "peer access device"})) continue;

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

    if (Contains(l, "insufficient shared memory"))
      c.Hit("shm.space", 78, false, "A process reports insufficient shared memory (/dev/shm) - PyTorch's own "
            "diagnosis of a bus error in a worker", &m);

    // --- interfaces and sockets
    if (Any(l, {"no socket interface found", "no usable interface", "no interface found", "unable to find address for",
                "no socket interface"})) {
      bool proven = !ifname.empty() && !IfnameMatchesAny(ifname, f.interfaces);
      if (Contains(l, "unable to find address for")) proven = true;  // Gloo names the interface it was told to use
      c.Hit("socket.ifname_missing", proven ? 92 : 72, proven,
            ifname.empty() ? "No network interface matches the socket interface setting"
                           : "NCCL_SOCKET_IFNAME=" + ifname + " names no interface with an address on this host",
            &m);
    }
    // EAFNOSUPPORT when NCCL creates its socket: the address family it picked is not available here
    // (no interface with an IPv4/IPv6 address, e.g. a container without a network).
    if (Contains(l, "socket creation failed") && Contains(l, "address family not supported"))
      c.Hit("socket.ifname_missing", 70, false, "NCCL could not create a socket for the address family of the "
            "interface it picked: no usable IP interface in this environment (container network, "
            "NCCL_SOCKET_IFNAME)", &m);
    if (Any(l, {"is neither af_inet", "unsupported address family", "unsupported ip family"})) {
      long long fam = -1;
      std::size_t at = l.find("family ");
      if (at != std::string::npos) fam = NumAt(l, at + 7);
      if (fam == 0 && ifname.empty()) {
        c.Hit("nccl.version_mismatch", 45, false, "A peer sent an address with family 0 (seen with mixed NCCL versions "
              "across nodes)", &m);
      } else {
        bool proven = !ifname.empty();
        c.Hit("socket.ifname_missing", proven ? 88 : 65, proven,
              (ifname.empty() ? std::string("No usable socket interface")
                              : "NCCL_SOCKET_IFNAME=" + ifname + " matches no usable interface") +
                  ": NCCL connected with an uninitialised address (family " + std::to_string(fam) + ")",
              &m);
      }
    }
    bool connect_fail = Any(l, {"connection refused", "no route to host", "connection timed out", "network is "
                                "unreachable", "call to connect", "connect to ", "failed to connect", "connect failed",
                                "software caused connection abort", "connection timeout"});
    bool peer_closed = Any(l, {"connection closed by remote peer", "connection closed by peer", "connection reset by "
                               "peer", "remote process exited", "remote peer closed", "broken pipe", "socket closed",
                               "peer has closed", "remote end closed"});
    if (peer_closed)
      c.Hit("socket.peer_closed", 42, false, "The connection to a peer was closed: that peer (another rank) failed "
            "first; its log holds the real error", &m);
    else if (connect_fail && !store_ctx && !Contains(l, "ibv_"))
      c.Hit("socket.unreachable", 55, false, "Ranks cannot open TCP connections to each other (firewall, wrong "
            "address/route, or the peer is not listening)", &m);
    // Connecting to Docker's default bridge or to loopback across hosts: the peer advertised the wrong
    // interface's address.
    if (connect_fail && !Contains(l, "ibv_") && Any(l, {" 172.17.", "<172.17.", "[172.17.", " 127.0.", "<127.0."}) &&
        !single_host_log)
      c.Hit("socket.wrong_interface", 66, false, "A peer advertised an address on Docker's default bridge or "
            "loopback (172.17.x / 127.x), which other hosts cannot reach", &m);
    // IPv4 link-local (RFC 3927) addresses are never routed: a failed connect to one means an interface
    // such as a pod-identity or APIPA link was chosen, whatever the number of hosts.
    if (connect_fail && !Contains(l, "ibv_") && Any(l, {" 169.254.", "<169.254.", "[169.254.", "/169.254."}))
      c.Hit("socket.wrong_interface", 66, false, "A connection to a link-local address (169.254.x) failed: NCCL/Gloo "
            "used an interface whose address is not routable between hosts", &m);

    // --- store / rendezvous
    if (Any(l, {"address already in use", "eaddrinuse", "errno: 98"}))
      c.Hit("store.port_in_use", store_ctx ? 90 : 60, store_ctx,
            store_ctx ? "The rendezvous store (TCPStore on MASTER_PORT) could not bind: the port is in use"
                      : "A listening socket could not bind: address already in use",
            &m);
    if (Any(l, {"waiting for clients", "clients joined"}))
      c.Hit("store.rendezvous_timeout", 88, false, "The store timed out waiting for ranks to join: not every rank "
            "reached init_process_group (wrong WORLD_SIZE / MASTER_ADDR, or ranks that crashed or never started)", &m);
    else if (Any(l, {"client socket has timed out", "rendezvoustimeouterror", "socket timeout", "diststoreerror",
                     "wait timeout after", "timed out initializing process group", "store_based_barrier",
                     "failed to connect to any network address", "connection to the c10d store has failed",
                     "rendezvous timeout", "timed out waiting for"}) ||
             (connect_fail && store_ctx))
      c.Hit("store.rendezvous_timeout", 60, false, "Ranks could not reach the rendezvous store (MASTER_ADDR:MASTER_PORT)"
            " in time", &m);

    // --- CUDA
    if (Any(l, {"driver version is insufficient", "cudaerrorinsufficientdriver", "driver is too old",
                "nvidia driver on your system is too old", "cuda_error_system_driver_mismatch"}))
      c.Hit("cuda.driver_too_old", 95, true, "The CUDA driver is older than the CUDA runtime the program / NCCL was "
            "built for", &m);
    if (Contains(l, "api call is not supported in the installed cuda driver") ||
        Contains(l, "cudaerrorcallrequiresnewerdriver"))
      c.Hit("cuda.driver_too_old", 58, false, "The installed CUDA driver lacks an API the program / NCCL calls (built "
            "for a newer CUDA)", &m);
    if (Any(l, {"unsupported display driver / cuda driver combination", "forward compatibility was attempted",
                "cudaerrorcompatnotsupportedondevice", "ptx was compiled with an unsupported toolchain",
                "cudaerrorunsupportedptxversion"}))
      c.Hit("cuda.driver_too_old", 70, false, "The driver is older than the CUDA the code was built with (forward "
            "compatibility not available on this GPU / driver, or PTX from a newer toolchain)", &m);
    if (Any(l, {"no cuda-capable device", "invalid device ordinal", "cudaerrornodevice", "cudaerrorinvaliddevice",
                "no cuda gpus are available", "found no nvidia driver"})) {
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
    if (Any(l, {"system not yet initialized", "cudaerrorsystemnotready", "error 802"}))
      c.Hit("cuda.system_not_ready", 75, false, "CUDA reports the system is not ready (cudaErrorSystemNotReady 802): "
            "on NVSwitch systems nvidia-fabricmanager is usually not running", &m);
    if (Contains(l, "out of memory") && Any(l, {"cuda", "cumem", "gpu"}) && !Contains(l, "killed process"))
      c.Hit("cuda.oom", 76, false, "A CUDA allocation (NCCL buffers or the framework's) ran out of GPU memory", &m);
    if (Any(l, {"illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
                "illegal instruction was encountered",
                "uncorrectable ecc", " xid "}))
      c.Hit("cuda.illegal_access", Contains(l, "illegal memory access") ? 74 : 62, false,
            "A GPU kernel faulted (illegal memory access / Xid); NCCL only reports it", &m);
    if (Contains(l, "duplicate gpu detected")) {
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

    // --- InfiniBand / RoCE
    bool verbs_call = Any(l, {"ibv_reg_mr", "ibv_create_qp", "ibv_create_cq", "ibv_alloc_pd", "ibv_reg_dmabuf_mr",
                              "ibv_create_srq", "ibv_modify_qp", "fi_mr_reg", "umem_reg"});
    if (verbs_call) {
      bool enomem = Any(l, {"cannot allocate memory", "enomem", "errno 12", "(12)"});
      bool reg = Any(l, {"ibv_reg_mr", "ibv_reg_dmabuf_mr", "fi_mr_reg", "umem_reg"});
      bool create = Any(l, {"ibv_create_qp", "ibv_create_cq", "ibv_create_srq", "ibv_alloc_pd"});
      // Queue / CQ creation with ENOMEM also happens when the device runs out of QPs / CQEs, so only a
      // memory registration proves the limit.
      if (enomem && (reg || create))
        c.Hit("ib.memlock", reg ? 90 : 78, reg, "Registering / creating an RDMA resource failed with ENOMEM: the "
              "locked-memory limit (ulimit -l) is too low for the job", &m);
      else if (create)
        c.Hit("ib.memlock", Contains(l, "ibv_create_qp") ? 55 : 42, false, "Creating an RDMA queue failed; the usual "
              "cause is a low locked-memory limit (not shown by the log)", &m);
    }
    // ENODEV from the verb names a missing device, not an unroutable GID.
    if (Contains(l, "ibv_modify_qp") && err && !Contains(l, "no such device")) {
      bool gid_table = !f.gids.empty() || roce || f.env.count("NCCL_IB_GID_INDEX") != 0;
      c.Hit("ib.gid_index", gid_table ? 70 : 52, false, "Connecting the RDMA queue pair failed (ibv_modify_qp): on RoCE "
            "usually a GID index whose address is not routable between the hosts (e.g. link-local fe80::)", &m);
    }
    // libibverbs warns about the limit itself.
    // ("max locked memory (kbytes, -l) unlimited" is `ulimit -a` showing the limit is fine.)
    if (Any(l, {"rlimit_memlock is", "couldn't lock memory", "limit memory registrations", "max locked memory",
                "ulimit -l"}) &&
        !EndsWith(Trim(l), "unlimited")) {
      // A library's own advice ("Please set max locked memory ...") is a guess printed with any ENOMEM, not a
      // measurement that the limit is what failed.
      bool advice = Any(l, {"please set", "please increase", "please raise", "consider "});
      c.Hit("ib.memlock", advice ? 72 : 88, !advice, "libibverbs reports the locked-memory limit (RLIMIT_MEMLOCK) is "
            "too low for RDMA registrations", &m);
    }
    bool completion = Any(l, {"got completion", "completion with error", "transport retry counter exceeded",
                              "ibv_wc_", "retry exceeded", "wc status", "work request flushed",
                              "ibv_poll_cq"});
    if (completion) {
      long long status = -1;
      for (const char* k : {"status=", "with error ", "status "}) {
        std::size_t at = l.find(k);
        if (at != std::string::npos) {
          status = NumAt(l, at + std::char_traits<char>::length(k));
          break;
        }
      }
      bool gid_hint = roce || Any(l, {"localgid", "remotegid"}) || f.env.count("NCCL_IB_GID_INDEX") != 0;
      bool link_local = Any(l, {"gid fe80", "localgid fe80", "remotegids fe80"}) ||
                        std::any_of(f.gids.begin(), f.gids.end(), [](const std::string& g) { return g.rfind("fe80", 0) == 0; });
      bool ib_only = !f.link_layers.empty() && !roce;
      bool vendor129 = Contains(l, "vendor err 129") || Contains(l, "vendor_err=129");
      if ((gid_hint && (status == 12 || status == 13) && (roce || link_local)) || (status == 12 && vendor129 && !ib_only))
        c.Hit("ib.gid_index", 66, false, "RoCE transport retries exceeded (status 12): packets do not reach the peer; "
              "on RoCE usually the GID index / address family (e.g. a link-local IPv6 GID)", &m);
      c.Hit("ib.completion_error", 62, false,
            "An IB/RoCE work completion failed" + (status >= 0 ? " (status " + std::to_string(status) + ")" : "") +
                ": link, MTU, PCI ACS or fabric problem between the two hosts",
            &m);
    }
    if (Any(l, {"gid index", "ibv_query_gid", "unable to find gid", "nccl_ib_gid_index", "no valid gid"}) && err)
      c.Hit("ib.gid_index", 70, false, "NCCL could not use the configured RoCE GID", &m);
    if (Any(l, {"net/ib : no device found", "net/ib: no device found", "no ib device", "no infiniband device",
                "unable to open device", "net/ib : unable"})) {
      bool expected = f.env.count("NCCL_IB_HCA") != 0 || env("NCCL_NET") == "IB";
      c.Hit("ib.no_device", expected ? 58 : 32, false, "NCCL's IB transport found no RDMA device", &m);
    }
    // NCCL >= 2.19: no network plugin (not even the internal IB / socket ones) could start.
    if (Contains(l, "failed to initialize any net plugin")) {
      if (efa_ctx)
        c.Hit("efa.provider", 60, false, "No NCCL network plugin could be initialised (the aws-ofi-nccl / libfabric "
              "one included)", &m);
      else
        c.Hit("ib.no_device", f.env.count("NCCL_IB_HCA") ? 62 : 56, false, "No NCCL network plugin could be "
              "initialised: the RDMA devices are not visible here (/dev/infiniband not passed in, or NCCL_IB_HCA "
              "names none)", &m);
    }
    if (Any(l, {"gpu direct rdma disabled", "gdr disabled", "nvidia-peermem", "nvidia_peermem", "nv_peer_mem",
                "gdrdma disabled"}))
      c.Hit("ib.gdr", 65, false, "GPUDirect RDMA is not used (nvidia_peermem not loaded or not detected)", &m);

    // --- EFA / libfabric
    bool ofi = efa_ctx || topic == "ofi" ||
               (m.match.entry != nullptr && (m.match.entry->source == "aws-ofi-nccl" || m.match.entry->source == "libfabric"));
    if (ofi && err && (Any(l, {"provider", "fi_getinfo", "net/ofi", "libfabric", "plugin"}) || HasWord(l, "efa") ||
                       HasWord(l, "ofi")))
      c.Hit("efa.provider", Any(l, {"couldn't find any optimal provider", "fi_getinfo", "no provider", "unable to find"})
                                ? 66 : 52, false,
            "The libfabric EFA provider / aws-ofi-nccl plugin is not usable (EFA devices, libfabric or the plugin "
            "missing in this environment)", &m);

    // --- topology
    if ((Contains(l, "attribute ") && Contains(l, " of node ")) ||
        (Any(l, {"nccl_topo_file", "topology file", "topo file", "xml"}) && err))
      c.Hit("topo.file", f.env.count("NCCL_TOPO_FILE") ? 74 : 68, false,
            "NCCL's topology XML (NCCL_TOPO_FILE or a plugin-injected file) does not describe this machine", &m);

    // --- versions (NCCL >= 2.23 says so itself)
    if (Any(l, {"mismatched nccl version detected", "nccl version mismatch with remote peer"}))
      c.Hit("nccl.version_mismatch", 94, true, "NCCL reports peers running a different NCCL version", &m);

    // --- collectives
    if (Any(l, {"mismatched collective detected", "collective mismatch error"}))
      c.Hit("collective.mismatch", 86, true, "NCCL saw a peer post a different collective / size (collective "
            "mismatch)", &m);
    if (Contains(l, "detected mismatch between collectives") || Contains(l, "collective fingerprint") ||
        Contains(l, "mismatch between collectives")) {
      // The fingerprints name what differs. Only a different operation, shape or dtype proves ranks issued
      // different collectives; the same operation at another sequence number is also what a rank that fell
      // one call behind (or the checker's own bookkeeping) looks like.
      std::vector<std::string> ops, shapes;
      for (std::string_view key : {"optype=", "tensorshape="})
        for (std::size_t at = l.find(key); at != std::string::npos; at = l.find(key, at + 1)) {
          std::size_t end = l.find_first_of(",)", at + key.size());
          std::string v = l.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
          (key == "optype=" ? ops : shapes).push_back(v);
        }
      auto all_same = [](const std::vector<std::string>& v) {
        return std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v.front(); });
      };
      bool only_sequence = ops.size() >= 2 && all_same(ops) && all_same(shapes);
      if (only_sequence)
        c.Hit("collective.mismatch", 68, false, "Ranks' collective fingerprints differ only in their sequence number "
              "(same operation): one rank is a call behind the others", &m);
      else
        c.Hit("collective.mismatch", 95, true, "Ranks called different collectives (desync)", &m);
    }
    // NCCL's socket transport got a different size than the receiver posted; from 2.27 NCCL itself
    // names mismatched collective sizes / NCCL_PROTO / NCCL_ALGO between ranks. In bootstrap the
    // exchanged structures are fixed per release, so a size difference there points at mixed versions.
    if (Contains(l, "message truncated") && Contains(l, "net/socket"))
      c.Hit("collective.mismatch", 66, false, "A peer sent a different message size than this rank expected: ranks "
            "posted collectives of different sizes or run with different NCCL_PROTO / NCCL_ALGO settings", &m);
    else if (Contains(l, "message truncated : received") && !Contains(l, "efa"))
      c.Hit("nccl.version_mismatch", 55, false, "A bootstrap message had an unexpected size: ranks probably run "
            "different NCCL releases (the bootstrap structures differ between versions)", &m);
    if (Any(l, {"for recv operation to complete", "for send operation to complete"}) && Contains(l, "timed out"))
      c.Hit("collective.timeout", 50, false, "A Gloo send/recv did not complete within the timeout", &m);
    if (Any(l, {"watchdog caught collective operation timeout", "timeout at nccl work", "collective operation timeout",
                "heartbeat monitor timed out", "watchdog got stuck", "exception (either an error or timeout) detected",
                "worknccl::checktimeout"}))
      c.Hit("collective.timeout", 50, false, "A collective did not complete within the process-group timeout", &m);

    // --- envelopes without the detail line (NCCL_DEBUG unset): the usual causes, low confidence
    if (Contains(l, "invalid usage") && Any(l, {"nccl", "run with nccl_debug"}))
      c.Hit("gpu.duplicate", 38, false, "NCCL reported invalid usage without detail; at communicator init the usual "
            "cause is two ranks on one GPU (rerun with NCCL_DEBUG=WARN to see the message)", &m);
    // ncclUnhandledCudaError without the WARN line that says which call failed: at communicator init the
    // usual cause is a driver older than the CUDA NCCL was built for (NCCL calls driver APIs the old driver
    // lacks); a low hint only, any CUDA detail in the log outranks it.
    if (Contains(l, "unhandled cuda error") && Any(l, {"ncclcomminitrank", "comminit", "init"}))
      c.Hit("cuda.driver_too_old", 25, false, "NCCL reported an unhandled CUDA error at init without detail; the "
            "usual cause is a CUDA driver older than the CUDA NCCL was built for (rerun with NCCL_DEBUG=WARN)", &m);
    if (Contains(l, "unhandled system error") && single_host)
      c.Hit("shm.space", 28, false, "NCCL reported a system error without detail on a single host; in containers "
            "most often /dev/shm is too small (rerun with NCCL_DEBUG=WARN)", &m);

    // --- host
    if (Any(l, {"out of memory: killed process", "oom-kill", "oom_kill", "oom killer"}))
      c.Hit("host.oom", 90, true, "The kernel's OOM killer killed a rank", &m);
    else if (Contains(l, "killed process"))
      c.Hit("host.oom", 60, false, "A process was killed (the wording of the kernel's OOM killer, without the OOM "
            "line)", &m);
    else if (Any(l, {"signal 9 (sigkill)", "exitcode: -9", "sigkill", "exit code 137"}))
      c.Hit("host.oom", 55, false, "A rank was killed with SIGKILL (usually the host OOM killer)", &m);
  }
}

// "2.26.2+cuda12.4" -> {2,26,2}; empty when not a version (also when a component has more than 8
// digits: the text comes from the log).
std::vector<int> VersionOf(std::string_view v) {
  std::vector<int> out;
  int cur = -1;
  for (char ch : v) {
    if (ch >= '0' && ch <= '9') {
      if (cur >= 10'000'000) return {};
      cur = (cur < 0 ? 0 : cur * 10) + (ch - '0');
    } else if (ch == '.' && cur >= 0) {
      out.push_back(cur);
      cur = -1;
    } else {
      break;
    }
  }
  if (cur >= 0) out.push_back(cur);
  return out;
}

// Known NCCL bugs fixed in a later release (from release notes and settled threads): a line with all
// `words` (lower case) while the log's NCCL version is in [from, fixed_in), or unknown when `unknown_ok`.
struct KnownBug {
  const char* from;
  const char* fixed_in;
  std::initializer_list<const char*> words;
  bool unknown_ok;
  const char* cause;
  const char* basis;
};
const KnownBug kKnownBugs[] = {
    {"2.26.2", "2.26.5", {"nvls", "invalid argument"}, false,
     "NCCL 2.26.2-2.26.4 fails NVLS setup with 'invalid argument' on older drivers (e.g. 12.2); fixed in 2.26.5",
     "pytorch/pytorch#150852 (maintainer: fixed by NCCL 2.26.5)"},
    {"0", "2.9.9", {"api call is not supported in the installed cuda driver"}, true,
     "NCCL before 2.9.9, built with a newer CUDA 11.x than the driver supports, calls driver APIs the installed driver "
     "lacks; NCCL 2.9.9 handles CUDA enhanced compatibility",
     "NVIDIA/nccl#496 (settled: NCCL 2.9.9)"},
    {"0", "99", {"ncclmaxsharedmem", "exceeds device/fn maxsharedmem"}, true,
     "This NCCL build has no kernels for this GPU architecture (its shared-memory use exceeds the device's): the GPU "
     "is newer than the NCCL release", "NVIDIA/nccl-tests#291 (settled: RTX 5090 works from NCCL 2.26.2)"},
    {"0", "2.26.2", {"geforce rtx 50"}, false,
     "NCCL before 2.26.2 does not work on GeForce RTX 50-series GPUs (sm_120)", "NVIDIA/nccl-tests#291 (settled: NCCL "
     "2.26.2)"},
};

void KnownBugRules(const RuleContext& ctx, Candidates& c) {
  std::vector<int> version;
  if (!ctx.facts.nccl_versions.empty()) version = VersionOf(ctx.facts.nccl_versions.front());
  for (const KnownBug& bug : kKnownBugs) {
    bool in_range = version.empty() ? bug.unknown_ok : (version >= VersionOf(bug.from) && version < VersionOf(bug.fixed_in));
    if (!in_range) continue;
    for (const Message& m : ctx.messages) {
      bool all = true;
      for (const char* w : bug.words) all = all && Contains(m.lower, w);
      if (!all) continue;
      c.Hit("nccl.bug", version.empty() ? 64 : 80, false,
            std::string(bug.cause) + " [" + bug.basis + "]" +
                (version.empty() ? "" : "; this log shows NCCL " + ctx.facts.nccl_versions.front()),
            &m);
      if (Diagnosis* d = c.Get("nccl.bug"); d != nullptr && d->basis.empty()) d->basis = bug.basis;
      break;
    }
  }
}

// Rules that need the whole picture: wrong interface chosen, version mismatch, desync across ranks.
void FactRules(const RuleContext& ctx, Candidates& c) {
  const LogFacts& f = ctx.facts;
  std::vector<std::string> virt;
  for (const std::string& i : f.interfaces)
    if (IsVirtualInterface(i)) virt.push_back(i);
  bool conn_problem = c.Has("socket.unreachable") || c.Has("store.rendezvous_timeout") || c.Has("socket.peer_closed") ||
                      c.Has("collective.timeout");
  if (!virt.empty() && conn_problem) {
    const Message* use = nullptr;
    for (const Message& m : ctx.messages)
      if (Contains(m.line->body, " : Using ") || Contains(m.line->body, ": Using ")) {
        for (const std::string& v : virt)
          if (Contains(m.line->body, v)) use = &m;
        if (use != nullptr) break;
      }
    c.Hit("socket.wrong_interface", 70, false, "NCCL/Gloo selected a virtual or loopback interface (" + Join(virt, ", ") +
          ") that peers cannot reach, and connections then failed", use);
  }
  // NCCL versions differing (major.minor.patch) within the inputs.
  std::vector<std::string> versions;
  for (const std::string& v : f.nccl_versions) {
    std::string core = v.substr(0, v.find_first_not_of("0123456789."));
    AddUnique(versions, core);
  }
  if (versions.size() > 1) {
    const Message* ev = nullptr;
    for (const Message& m : ctx.messages)
      if (Contains(m.line->body, "NCCL version ")) {
        if (ev == nullptr) ev = &m;
        c.Hit("nccl.version_mismatch", 82, true, "Different NCCL versions in use: " + Join(versions, ", "), &m);
      }
  }
  // Watchdog progress: ranks at different SeqNum / OpType.
  std::map<long long, std::vector<const RankProgress*>> by_seq;
  for (const RankProgress& p : f.progress)
    if (p.seq >= 0) by_seq[p.seq].push_back(&p);
  bool different_op = false;
  for (auto& [seq, ps] : by_seq)
    for (const RankProgress* p : ps)
      if (!p->op.empty() && !ps.front()->op.empty() && p->op != ps.front()->op) different_op = true;
  auto evidence_for = [&](std::string_view id) {
    for (const RankProgress& p : f.progress) {
      EvidenceLine e;
      e.line = p.line;
      e.text = p.text;
      if (ctx.names.size() > 1) e.source = p.source;
      c.AddEvidenceLine(id, std::move(e));
    }
  };
  if (different_op) {
    c.Hit("collective.mismatch", 88, true, "Ranks timed out in different collectives at the same sequence number "
          "(desync: they issued different operations)", nullptr);
    evidence_for("collective.mismatch");
  } else if (by_seq.size() > 1) {
    std::string detail;
    for (auto& [seq, ps] : by_seq) {
      std::vector<std::string> ranks;
      for (const RankProgress* p : ps) ranks.push_back(std::to_string(p->rank));
      detail += (detail.empty() ? "" : "; ") + std::string("SeqNum ") + std::to_string(seq) + ": rank(s) " + Join(ranks, ",");
    }
    c.Hit("collective.mismatch", 68, false, "Ranks stopped at different sequence numbers (" + detail +
          "): a rank fell behind or skipped a collective", nullptr);
    evidence_for("collective.mismatch");
  } else if (Diagnosis* d = c.Get("collective.timeout"); d != nullptr && !by_seq.empty()) {
    auto& [seq, ps] = *by_seq.begin();
    d->cause = (ps.size() == 1 ? std::string("The reporting rank") : "All " + std::to_string(ps.size()) + " reporting ranks") +
               " timed out in " +
               (ps.front()->op.empty() ? std::string("the same collective") : ps.front()->op) + " SeqNum=" +
               std::to_string(seq) + ": a rank that did not report (or a slow one) is holding them";
  }
}

}  // namespace

std::vector<Diagnosis> ScoreCauses(const RuleContext& ctx) {
  Candidates c(ctx.names);
  bool store_ctx = false, efa_ctx = false;
  for (const Message& m : ctx.messages) {
    if (Any(m.lower, {"tcpstore", "rendezvous", "master_port", "init_process_group", "server socket", "c10d store",
                      "main_process_port", "store = "}))
      store_ctx = true;
    if (Any(m.lower, {"net/ofi", "aws-ofi", "libfabric", "fi_provider"}) || HasWord(m.lower, "efa")) efa_ctx = true;
  }
  for (const auto& [k, v] : ctx.facts.env)
    if (k.rfind("FI_", 0) == 0) efa_ctx = true;
  MessageRules(ctx, c, store_ctx, efa_ctx);
  CodeRules(ctx, c);
  FactRules(ctx, c);
  KnownBugRules(ctx, c);
  // Specific causes explain the generic symptoms (a closed connection, a collective timeout): keep the
  // symptom, but below them.
  std::vector<Diagnosis> out = c.Take();
  // The cause whose evidence is the first real error outranks causes seen only later (their lines are
  // often consequences: an invalid device ordinal after a failed CUDA call).
  // The cause whose evidence is the first real error outranks causes seen only later (their lines are
  // often consequences: an invalid device ordinal after a failed CUDA call).
  for (Diagnosis& d : out)
    for (const EvidenceLine& e : d.evidence)
      if (e.line == ctx.facts.first_error.line && e.source == ctx.facts.first_error.source) {
        d.score = std::min(99, d.score + 6);
        break;
      }
  bool specific = false;
  for (const Diagnosis& d : out)
    if (d.signature != "socket.peer_closed" && d.signature != "collective.timeout" && d.score >= 50) specific = true;
  if (specific)
    for (Diagnosis& d : out)
      if (d.signature == "socket.peer_closed" || d.signature == "collective.timeout") {
        d.score = std::min(d.score, 30);
        d.confidence = Confidence::kLow;
      }
  std::stable_sort(out.begin(), out.end(), [](const Diagnosis& a, const Diagnosis& b) {
    if (a.score != b.score) return a.score > b.score;
    int la = a.evidence.empty() ? 1 << 30 : a.evidence.front().line;
    int lb = b.evidence.empty() ? 1 << 30 : b.evidence.front().line;
    return la < lb;
  });
  // A proof is only a proof when nothing else in the log makes a strong case too: with two families
  // (shm, socket, cuda, ib ...) both well supported, the log does not say which one broke the run.
  auto family = [](const std::string& id) { return id.substr(0, id.find('.')); };
  if (!out.empty() && out.front().confidence == Confidence::kHigh)
    for (std::size_t i = 1; i < out.size(); ++i)
      if (family(out[i].signature) != family(out.front().signature) && out[i].score >= kStrongScore) {
        out.front().confidence = Confidence::kMedium;
        break;
      }
  return out;
}

}  // namespace commkit::diagnostics::explain
