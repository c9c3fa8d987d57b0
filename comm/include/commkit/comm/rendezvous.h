// Rendezvous: from the launcher's environment to a connected store that every rank of the job shares.
//
// The store is chosen by COMMKIT_STORE:
//   tcp://HOST:PORT          a TcpStore (default: tcp://MASTER_ADDR:MASTER_PORT). Rank 0 starts the
//                            server unless the launcher hosts it (commkit-run sets COMMKIT_STORE_HOSTED=1).
//   file:///shared/dir       a FileStore on a filesystem every rank sees
//   etcd://HOST:PORT[/PREFIX]  an EtcdStore (Kubernetes-style deployments)
// Every rank then announces itself (host name and pid) and waits for all the others, so a rank that
// never arrives is named: "rendezvous: ranks [5, 7] of 8 did not arrive within 300 s".
//
// Coexistence (docs/launchers.md): without COMMKIT_STORE the TcpStore uses the first of
// MASTER_PORT, MASTER_PORT+1, ..., MASTER_PORT+7 that is not held by another server (torchrun's own
// store listens on MASTER_PORT); rank 0 binds the first free one and the others probe them in order,
// skipping servers that do not speak commkit's protocol or reject this job's token.
//
// Runs on shared stores (file, etcd, a standalone commkit-store): keys live under "run-<run id>/"
// and, inside it, under a generation that rank 0 opens ("gen/current", incremented once per run) and
// the others join, so a previous run's keys never satisfy a new rendezvous.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/launch_env.h"
#include "commkit/comm/store.h"
#include "commkit/comm/tcp_store.h"

namespace commkit {

struct RendezvousOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // COMMKIT_RENDEZVOUS_TIMEOUT overrides
  bool wait_for_all = true;  // announce and wait for every rank
};

struct Rendezvous {
  LaunchInfo info;
  std::shared_ptr<Store> store;     // shared by the job (a PrefixStore per job when the store is shared)
  std::vector<std::string> hosts;   // host name of each rank (when wait_for_all)
  std::int64_t generation = 0;      // the run's generation on a shared store (0: a store of its own)
};

Result<Rendezvous> RendezvousFromEnvironment(const EnvMap& env, const RendezvousOptions& options = {});
Result<Rendezvous> RendezvousFromEnvironment(const RendezvousOptions& options = {});

// The ports the job's TcpStore may use, derived from MASTER_PORT (see above): 8 consecutive ports,
// starting after MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE says torchrun's agent serves it.
std::vector<int> StorePortCandidates(int master_port, const EnvMap& env);

struct JobStoreOptions {
  std::string host;                  // where the server is (clients; the server checks itself there, "" = loopback)
  std::vector<int> ports;            // StorePortCandidates
  bool is_server = false;            // bind the first free candidate (rank 0, or commkit-run on node 0)
  std::string bind_host = "0.0.0.0";
  std::string token;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // clients: how long to look
};
// Starts or finds the job's TcpStore on the candidate ports. The store's port() is the one chosen.
// Errors name every candidate and why it was skipped.
Result<std::unique_ptr<TcpStore>> OpenJobTcpStore(const JobStoreOptions& options);

// Opens this run's generation on a store other runs may have used (file, etcd, standalone tcp):
// rank 0 opens a new one, the others join the newest one that is open and not complete. Returns a
// PrefixStore for the generation. Exposed for tests; RendezvousFromEnvironment calls it.
struct RunGeneration {
  std::int64_t generation = 0;
  std::shared_ptr<Store> store;
};
Result<RunGeneration> JoinRunGeneration(std::shared_ptr<Store> run_store, const LaunchInfo& info,
                                        std::chrono::milliseconds timeout);

// Parses a COMMKIT_STORE URL and opens that store for this rank (rank 0 may start a tcp server).
Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const LaunchInfo& info, const std::string& token,
                                         bool hosted, std::chrono::milliseconds timeout);

}  // namespace commkit
