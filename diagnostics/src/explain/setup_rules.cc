// Whole-log rules over what NCCL reports while it sets up, read together: the transport each channel
// took on each rank, the network it was asked for, and a process that crashed with nothing else wrong.
#include <cctype>
#include <string>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

// A backtrace frame or a loader line inside NCCL: libnccl.so, or one of its functions ("ncclProxyProgress()",
// "ncclCommInitRank (...)") - an identifier "nccl" + a capital, lower-cased here, followed by "(".
bool NamesNcclCode(const std::string& l) {
  if (Contains(l, "libnccl")) return true;
  for (std::size_t at = l.find("nccl"); at != std::string::npos; at = l.find("nccl", at + 4)) {
    std::size_t e = at + 4;
    while (e < l.size() && std::isalnum(static_cast<unsigned char>(l[e]))) ++e;
    while (e < l.size() && l[e] == ' ') ++e;
    if (e > at + 5 && e < l.size() && l[e] == '(' && (at == 0 || !std::isalnum(static_cast<unsigned char>(l[at - 1]))))
      return true;
  }
  return false;
}

}  // namespace

void SetupRules(const RuleContext& ctx, Candidates& c) {
  const Message* ib_with_gdr = nullptr;
  const Message* ib_without_gdr = nullptr;
  const Message* no_ib_device = nullptr;
  const Message* ib_wanted = nullptr;
  const Message* no_verbs = nullptr;
  const Message* socket_over_ipoib = nullptr;
  const Message* crash = nullptr;
  bool nccl_seen = !ctx.facts.nccl_versions.empty();
  for (const Message& m : ctx.messages) {
    const std::string& l = m.lower;
    if (m.line->nccl_info || m.line->nccl_warn || NamesNcclCode(l)) nccl_seen = true;
    // "0[1a000] -> 2[6b000] [send] via NET/IB/0/GDRDMA": the NIC reads the GPU's memory directly; without
    // "/GDRDMA" the data is staged through host memory.
    if (Contains(l, "via net/ib")) (Contains(l, "/gdrdma") ? ib_with_gdr : ib_without_gdr) = &m;
    if (Contains(l, "net/ib : no device found")) no_ib_device = &m;
    // NCCL dlopens rdma-core at init; without it the IB transport does not exist and NCCL says only this.
    if (Contains(l, "failed to open libibverbs")) no_verbs = &m;
    // "NET/Socket : Using [0]ib0:10.1.0.5<0>": the socket transport running over IPoIB, i.e. on an IB fabric.
    if (Any(l, {"net/socket : using", "net/socket: using"}) && Contains(l, "]ib")) socket_over_ipoib = &m;
    // The job asked for InfiniBand: an HCA list (not an exclusion), IB explicitly enabled, or the IB network.
    if ((Contains(l, "nccl_ib_hca set") && !Contains(l, "to ^")) ||
        Contains(l, "nccl_ib_disable set by environment to 0") || Contains(l, "nccl_net set by environment to ib"))
      ib_wanted = &m;
    if (crash == nullptr && Any(l, {"process received signal", "segmentation fault", "signal 11 (sigsegv)",
                                    "caught signal 11", "signal: segmentation", "fatal python error: segmentation"}))
      crash = &m;
  }
  // GPUDirect RDMA on some ranks and not on others: the nodes without it lack the peer-memory module
  // (nvidia-peermem / nv_peer_mem) or DMA-BUF support, and their traffic is staged through host memory.
  if (ib_with_gdr != nullptr && ib_without_gdr != nullptr) {
    c.Hit("ib.gdr", 56, false, "Some InfiniBand channels use GPUDirect RDMA (NET/IB/../GDRDMA) and others do "
          "not: the nodes without it most likely lack nvidia-peermem (or DMA-BUF support)", ib_without_gdr);
    c.AddEvidence("ib.gdr", *ib_with_gdr);
  }
  // NCCL probes IB on every machine and says "No device found" where there is none; that matters only
  // when the job asked for IB.
  if (no_ib_device != nullptr && ib_wanted != nullptr) {
    c.Hit("ib.no_device", 64, false, "The job asks for InfiniBand (NCCL_IB_HCA / NCCL_IB_DISABLE=0 / NCCL_NET=IB) "
          "but NCCL found no IB device: the HCAs are not visible here (RDMA not enabled, /dev/infiniband not "
          "passed into the container, or a wrong HCA name), so it fell back to sockets", no_ib_device);
    c.AddEvidence("ib.no_device", *ib_wanted);
  }
  // No libibverbs on a machine that has InfiniBand (its sockets run over IPoIB, or the job asked for IB):
  // the image lacks rdma-core, so every byte goes through TCP. Most machines without IB print the same
  // line, so it proves nothing alone.
  if (no_verbs != nullptr && (socket_over_ipoib != nullptr || ib_wanted != nullptr)) {
    c.Hit("ib.no_device", 66, false, "NCCL could not load libibverbs (rdma-core is not installed in this image "
          "or container) although the machine has InfiniBand, so it runs over TCP sockets: install "
          "libibverbs1 / rdma-core (and pass /dev/infiniband into the container)", no_verbs);
    c.AddEvidence("ib.no_device", socket_over_ipoib != nullptr ? *socket_over_ipoib : *ib_wanted);
  }
  // A crash inside a process running NCCL, with no failure NCCL or the framework reported: the library
  // (or its network plugin) is the first suspect; the backtrace tells.
  if (crash != nullptr && nccl_seen)
    c.Hit("nccl.bug", 30, false, "A process crashed (segmentation fault / fatal signal) while it ran NCCL and the "
          "log shows no other failure: an NCCL or network-plugin bug is the first suspect (get the backtrace: "
          "gdb or NCCL_DEBUG=INFO with the core; try the latest NCCL)", crash);
}

}  // namespace commkit::diagnostics::explain
