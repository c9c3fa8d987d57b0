// Rendezvous: from the launcher's environment to a connected store that every rank of the job shares.
//
// The store is chosen by COMMKIT_STORE:
//   tcp://HOST:PORT          a TcpStore (default: tcp://MASTER_ADDR:MASTER_PORT). Rank 0 starts the
//                            server unless the launcher hosts it (commkit-run sets COMMKIT_STORE_HOSTED=1).
//   file:///shared/dir       a FileStore on a filesystem every rank sees
//   etcd://HOST:PORT[/PREFIX]  an EtcdStore (Kubernetes-style deployments)
// Every rank then announces itself (host name and pid) and waits for all the others, so a rank that
// never arrives is named: "rendezvous: ranks [5, 7] of 8 did not arrive within 300 s".
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/launch_env.h"
#include "commkit/comm/store.h"

namespace commkit {

struct RendezvousOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // COMMKIT_RENDEZVOUS_TIMEOUT overrides
  bool wait_for_all = true;  // announce and wait for every rank
};

struct Rendezvous {
  LaunchInfo info;
  std::shared_ptr<Store> store;     // shared by the job (a PrefixStore per job when the store is shared)
  std::vector<std::string> hosts;   // host name of each rank (when wait_for_all)
};

Result<Rendezvous> RendezvousFromEnvironment(const EnvMap& env, const RendezvousOptions& options = {});
Result<Rendezvous> RendezvousFromEnvironment(const RendezvousOptions& options = {});

// Parses a COMMKIT_STORE URL and opens that store for this rank (rank 0 may start a tcp server).
Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const LaunchInfo& info, const std::string& token,
                                         bool hosted, std::chrono::milliseconds timeout);

}  // namespace commkit
