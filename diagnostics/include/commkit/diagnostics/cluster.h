// gpudoctor cluster mode: every rank runs the node checks and probes the network to every other rank;
// rank 0 gathers everything through a shared Store and builds one ClusterReport (per-host results,
// consistency diff, TCP connectivity matrix, pairwise bandwidth naming the slow host or link).
//
// Contract: RunCluster blocks the calling rank until its part is done; every wait is bounded by
// ClusterOptions::timeout (ranks that never arrive are named in the report, not waited on forever) and
// every connection attempt by connect_timeout. Each rank must call it exactly once with the same
// `world` and `session` on a store the ranks share. Uses keys under "gpudoctor/<session>/".
// Thread-safe for distinct stores/sessions; not re-entrant on one session.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commkit/comm/store.h"
#include "commkit/common/status.h"
#include "commkit/diagnostics/check.h"

namespace commkit::diagnostics {

struct ClusterOptions {
  int rank = 0;
  int world = 1;
  std::string session = "default";
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};         // each gather/barrier
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(3)};  // each TCP connect / transfer step
  std::int64_t bandwidth_bytes = 8 << 20;  // per ordered pair; 0 disables the bandwidth test
  // Address to listen on for the connectivity/bandwidth probes. Empty: the first address of the
  // interface NCCL would pick (NCCL_SOCKET_IFNAME rules), as the bootstrap would.
  std::string listen_address;
  Selection selection;  // which node checks every rank runs
};

struct ClusterLink {
  int from = 0;
  int to = 0;
  bool ok = false;
  std::string error;       // "refused", "timeout", "no route", ... with detail
  double mbytes_per_s = 0;  // bandwidth (MB/s, 1e6), 0 when not measured
};

struct ClusterHost {
  int rank = 0;
  bool arrived = false;
  std::string host;
  std::string listen;                        // "addr:port" or "" with why in listen_error
  std::string listen_error;
  std::string iface;                         // interface NCCL would pick
  std::map<std::string, std::string> facts;  // compared across hosts
  Report report;                             // its node checks
};

struct ClusterFinding {
  CheckStatus status = CheckStatus::kWarn;
  std::vector<int> ranks;  // the hosts it names
  std::string summary;
  std::string fix;
};

struct ClusterReport {
  std::vector<ClusterHost> hosts;  // index = rank
  std::map<std::string, std::map<std::string, std::vector<int>>> diff;  // fact -> value -> ranks
  std::vector<ClusterLink> links;
  double median_mbytes_per_s = 0;
  std::vector<ClusterFinding> findings;
  int ExitCode() const;  // 0 / 1 warnings / 2 failures (node or cluster)
  std::string ToText(bool color) const;
  std::string ToJson() const;
};

// The facts a rank publishes for the consistency diff: env.NCCL_*/FI_* (the "env" fact), nvidia.driver,
// cuda.driver_version (NVML's CUDA version, "12.4", from context.topology(): the probe the node checks
// share), nccl.version (every NCCL core library found, "2.21.5" or "2.18.1, 2.21.5"), nccl.net_plugins
// (the net plugin(s) NCCL would dlopen, or "none ..."), net.interfaces, net.nccl_iface (+ .mtu) and
// ib.ports. Everything is read through context.system.
std::map<std::string, std::string> CollectClusterFacts(const CheckContext& context, std::string* chosen_iface,
                                                       std::string* chosen_address);

// Runs this rank's part. Rank 0 returns the report; other ranks return std::nullopt.
Result<std::optional<ClusterReport>> RunCluster(Store& store, const CheckRegistry& registry,
                                                const CheckContext& context, const ClusterOptions& options);

// Builds the report from gathered hosts and links (pure; exposed for tests).
ClusterReport BuildClusterReport(std::vector<ClusterHost> hosts, std::vector<ClusterLink> links);

}  // namespace commkit::diagnostics
