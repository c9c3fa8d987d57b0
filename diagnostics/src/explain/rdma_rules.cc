// Rules for RDMA networks: InfiniBand / RoCE verbs (locked memory, GID index, completion errors, missing
// devices, GPUDirect RDMA) and libfabric / EFA through the aws-ofi-nccl plugin.
#include <algorithm>
#include <string>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

void IbRules(const LogContext& log, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  bool err = v.err;
  const LogFacts& f = log.facts;
  bool roce = log.roce, efa_ctx = log.efa_ctx;
  auto env = [&](const char* k) { return log.Env(k); };
  // --- InfiniBand / RoCE
  bool verbs_call = Any(l, {"ibv_reg_mr", "ibv_create_qp", "ibv_create_cq", "ibv_alloc_pd", "ibv_reg_dmabuf_mr",
                            "ibv_create_srq", "ibv_modify_qp", "fi_mr_reg", "umem_reg"});
  if (verbs_call) {
    bool enomem = Any(l, {"cannot allocate memory", "enomem", "errno 12", "(12)"});
    bool reg = Any(l, {"ibv_reg_mr", "ibv_reg_dmabuf_mr", "fi_mr_reg", "umem_reg"});
    bool create = Any(l, {"ibv_create_qp", "ibv_create_cq", "ibv_create_srq", "ibv_alloc_pd"});
    // Queue / CQ creation with ENOMEM also happens when the device runs out of QPs / CQEs, so only a
    // memory registration proves the limit.
    // A log that shows the limit is already unlimited rules the limit out: the ENOMEM then comes from the
    // device (MR / MTT resources, GPU memory registration), not from RLIMIT_MEMLOCK.
    // A dma-buf registration (GPUDirect through the GPU's exporter) pins nothing against RLIMIT_MEMLOCK:
    // its ENOMEM is the GPU's or the device's (BAR space, MR resources, oversized NCCL buffers).
    const bool dmabuf = Contains(l, "dmabuf");
    if (enomem && dmabuf)
      c.Hit("ib.memlock", 40, false, "Registering GPU memory through dma-buf failed with ENOMEM: not the "
            "locked-memory limit (dma-buf pins nothing against it) but GPU BAR space or NIC memory-region resources "
            "(large NCCL_BUFFSIZE, many communicators)", &m);
    else if (enomem && (reg || create) && log.memlock_unlimited)
      c.Hit("ib.memlock", 45, false, "Registering / creating an RDMA resource failed with ENOMEM although the log "
            "shows an unlimited locked-memory limit: device resources or GPU memory registration, not ulimit -l", &m);
    else if (enomem && (reg || create))
      c.Hit("ib.memlock", reg ? 90 : 78, reg, "Registering / creating an RDMA resource failed with ENOMEM: the "
            "locked-memory limit (ulimit -l) is too low for the job", &m);
    else if (create)
      c.Hit("ib.memlock", Contains(l, "ibv_create_qp") ? 55 : 42, false, "Creating an RDMA queue failed; the usual "
            "cause is a low locked-memory limit (not shown by the log)", &m);
  }
  if (Contains(l, "ibv_modify_qp") && err) {
    const bool gid_shown = !f.gids.empty() || f.env.count("NCCL_IB_GID_INDEX") != 0;
    if (!Contains(l, "no such device")) {
      c.Hit("ib.gid_index", gid_shown || roce ? 70 : 52, false, "Connecting the RDMA queue pair failed "
            "(ibv_modify_qp): on RoCE usually a GID index whose address is not routable between the hosts (e.g. "
            "link-local fe80::)", &m);
    } else {
      // ENODEV from modify_qp comes after the device was opened and the QP created: the kernel found no
      // network device behind the GID entry it was given (an empty or wrong index, or a netdev outside the
      // container's network namespace). A device the HCA list should not have named reads the same, which
      // stays the first candidate (code_rules.cc) unless the log shows the GID setup (RoCE alone does not:
      // NVIDIA/nccl#799 was a RoCE HCA to leave out).
      c.Hit("ib.gid_index", gid_shown ? 64 : 56, false, "Connecting the RDMA queue pair failed with ENODEV "
            "(ibv_modify_qp): the GID entry NCCL uses has no network device behind it here (wrong or empty "
            "NCCL_IB_GID_INDEX, or the RoCE netdev is not in the container's namespace; check show_gids)", &m);
    }
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
    // NCCL (2.21+) names the GIDs it used. An IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d) is the one its default
    // selection prefers and is routable, so the retries point at the fabric, not at the GID index.
    bool v4_mapped_gid = Contains(l, "localgid ::ffff:") && !link_local;
    if (!v4_mapped_gid &&
        ((gid_hint && (status == 12 || status == 13) && (roce || link_local)) || (status == 12 && vendor129 && !ib_only)))
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

}

bool OfiSocketProviderFallback(const std::string& l) {
  return Contains(l, "net/ofi selected provider is ") && Any(l, {"is tcp", "is sockets", "is udp"});
}

void EfaRules(const LogContext& log, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  const std::string& topic = v.topic;
  bool err = v.err;
  bool efa_ctx = log.efa_ctx;
  // --- EFA / libfabric
  bool ofi = efa_ctx || topic == "ofi" ||
             (m.match.entry != nullptr && (m.match.entry->source == "aws-ofi-nccl" || m.match.entry->source == "libfabric"));
  // aws-ofi-nccl settles on libfabric's tcp / sockets provider only when no efa provider is usable (the EFA
  // devices are not in the container, or libfabric lacks the provider), unless FI_PROVIDER asked for it.
  if (OfiSocketProviderFallback(l)) {
    const std::string asked = log.Env("FI_PROVIDER");
    if (asked.empty() || !Contains(l, ToLower(asked)))
      c.Hit("efa.provider", 62, false, "aws-ofi-nccl fell back to libfabric's TCP provider: no usable EFA provider "
            "(EFA devices or the efa provider missing here)", &m);
  }
  if (ofi && err && (Any(l, {"provider", "fi_getinfo", "net/ofi", "libfabric", "plugin"}) || HasWord(l, "efa") ||
                     HasWord(l, "ofi")))
    c.Hit("efa.provider", Any(l, {"couldn't find any optimal provider", "fi_getinfo", "no provider", "unable to find"})
                              ? 66 : 52, false,
          "The libfabric EFA provider / aws-ofi-nccl plugin is not usable (EFA devices, libfabric or the plugin "
          "missing in this environment)", &m);

}

}  // namespace commkit::diagnostics::explain
