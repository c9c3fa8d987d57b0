// Logs that show no failure but stop during NCCL's communicator init: the last stage NCCL reported says
// what it was waiting for. NCCL's init prints (NCCL_DEBUG=INFO) the bootstrap interface ("Bootstrap :
// Using"), the network ("NET/Socket : Using", "Using network"), "Init START", one line per channel and
// peer naming the transport ("Channel 00/0 : 0[1000] -> 1[2000] via P2P/IPC"), "Connected all rings /
// trees" and finally "Init COMPLETE". A pasted log that ends earlier with nothing wrong in it is usually a
// hang at that stage (or a cut paste, which is why these claims are low):
//   - before any channel was connected: the ranks could not meet over TCP (bootstrap): a firewall, or an
//     interface or address peers cannot reach; on one machine (one host, several GPUs) that is unlikely,
//     and the single-node hang is peer-to-peer traffic, as below;
//   - after P2P channels: peer-to-peer traffic that never arrives (PCIe ACS / IOMMU redirecting it, VMs
//     without real peer access): NCCL_P2P_DISABLE=1 confirms it;
//   - after NET/Socket channels: the interface NCCL connects over does not route between the nodes;
//   - after NET/IB channels on RoCE: queue pairs that never connect, most often the GID index.
#include <string>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

void InitStallRules(const RuleContext& ctx, Candidates& c) {
  const Message* last_stage = nullptr;  // the last init-progress line
  const Message* last_channel = nullptr;
  bool nccl_init = false;
  for (const Message& m : ctx.messages) {
    const std::string& l = m.lower;
    // Any failure, or a finished init / a benchmark's result, is explained by other rules.
    if (LooksLikeError(m) || Contains(l, "init complete") || Contains(l, "avg bus bandwidth")) return;
    if (Any(l, {"bootstrap : using", "nccl info bootstrap", "net/socket : using", "using network", "init start",
                "net/ib : using", "net/plugin", "connected all rings", "connected all trees"})) {
      nccl_init = true;
      last_stage = &m;
    }
    if (Contains(l, "channel ") && Contains(l, " via ")) {
      nccl_init = true;
      last_stage = &m;
      last_channel = &m;
    }
  }
  if (!nccl_init || last_stage == nullptr) return;
  if (last_channel == nullptr && ctx.facts.hosts.size() == 1 && ctx.facts.cuda_devices.size() >= 2) {
    // Ranks of one machine meet over its own address, which a firewall between hosts does not touch;
    // the hang NCCL's troubleshooting guide names for one machine is peer-to-peer traffic.
    c.Hit("p2p.unsupported", 28, false, "The log ends during NCCL's init on one machine with no error and no "
          "channel connected: ranks on one host rarely fail to meet over TCP; the usual single-node hang is "
          "peer-to-peer traffic between the GPUs (PCIe ACS / IOMMU, or a VM without real peer access); "
          "NCCL_P2P_DISABLE=1 confirms it", last_stage);
    return;
  }
  if (last_channel == nullptr) {
    c.Hit("socket.unreachable", 30, false, "The log ends during NCCL's bootstrap with no error and no channel "
          "connected: the ranks most likely could not reach each other over TCP (a firewall / security group, or "
          "an address or interface the peers cannot route to)", last_stage);
    return;
  }
  const std::string& l = last_channel->lower;
  if (Contains(l, "via p2p"))
    c.Hit("p2p.unsupported", 30, false, "The log ends after NCCL connected peer-to-peer channels, with no error: "
          "the usual hang of P2P traffic that never arrives (PCIe ACS / IOMMU, or a VM without real peer access); "
          "NCCL_P2P_DISABLE=1 confirms it", last_channel);
  else if (Contains(l, "via net/socket"))
    c.Hit("socket.wrong_interface", 30, false, "The log ends after NCCL connected socket channels between nodes, "
          "with no error: the interface it connects over most likely does not route between the nodes",
          last_channel);
  else if (Contains(l, "via net/ib") && UsesRoce(ctx.facts))
    c.Hit("ib.gid_index", 30, false, "The log ends after NCCL set up RoCE channels, with no error: queue pairs "
          "that never connect, most often a GID index / address family the peers do not share", last_channel);
}

}  // namespace commkit::diagnostics::explain
