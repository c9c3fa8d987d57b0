#include "commkit/comm/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "commkit/comm/etcd_store.h"
#include "commkit/comm/file_store.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/common/env.h"
#include "commkit/common/host_port.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

struct StoreAddress {
  HostPort endpoint;
  std::string path;  // after the first '/': the etcd key prefix
};

// "HOST:PORT[/path]" after the scheme of a COMMKIT_STORE URL.
Result<StoreAddress> ParseStoreAddress(std::string_view rest, std::string_view url) {
  StoreAddress a;
  auto slash = rest.find('/');
  if (slash != std::string_view::npos) a.path = std::string(rest.substr(slash + 1));
  auto hp = ParseHostPort(rest.substr(0, slash));
  if (!hp.ok()) return hp.status().WithContext(StrCat("COMMKIT_STORE='", url, "'"));
  a.endpoint = std::move(hp).value();
  return a;
}

Status MissingRanks(const Status& waited, Store& store, const LaunchInfo& info, const std::string& who,
                    std::chrono::milliseconds timeout) {
  if (waited.code() != StatusCode::kTimeout) return waited.WithContext(StrCat(who, ": rendezvous"));
  std::vector<std::string> missing;
  for (int r = 0; r < info.world_size; ++r) {
    auto present = store.Check({StrCat("rdzv/rank/", r)});
    if (present.ok() && !*present) missing.push_back(std::to_string(r));
  }
  if (missing.empty())
    return Status::Timeout(StrCat(who, ": rendezvous: every rank announced itself but rank 0 did not confirm the "
                                       "rendezvous within ", HumanSeconds(timeout.count() / 1000.0), " at ",
                                  store.Describe(), " (is rank 0 of this run alive?)"));
  return Status::Timeout(StrCat(who, ": rendezvous: ranks [", Join(missing, ", "), "] of ", info.world_size,
                                " did not arrive within ", HumanSeconds(timeout.count() / 1000.0), " at ",
                                store.Describe(), ". Check that every rank was started and can reach ",
                                info.master_addr, ":", info.master_port));
}

}  // namespace

Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const LaunchInfo& info, const std::string& token,
                                         bool hosted, std::chrono::milliseconds timeout) {
  std::shared_ptr<Store> store;
  if (StartsWith(url, "tcp://")) {
    COMMKIT_ASSIGN_OR_RETURN(StoreAddress a, ParseStoreAddress(std::string_view(url).substr(6), url));
    const HostPort& hp = a.endpoint;
    TcpStoreOptions o;
    o.host = hp.host;
    o.port = hp.port;
    o.token = token;
    o.timeout = timeout;
    o.connect_timeout = timeout;
    o.is_server = info.rank == 0 && !hosted;
    o.bind_host = info.num_nodes > 1 ? "0.0.0.0" : "127.0.0.1";
    if (o.is_server && (hp.host == "localhost" || StartsWith(hp.host, "127."))) o.bind_host = "127.0.0.1";
    else if (o.is_server) o.bind_host = "0.0.0.0";
    auto tcp = TcpStore::Create(o);
    if (!tcp.ok() && o.is_server && tcp.status().message().find("already in use") != std::string::npos)
      return tcp.status().WithContext(StrCat("COMMKIT_STORE='", url, "' (rank 0 serves it; if a standalone commkit-store "
                                             "serve runs there, set COMMKIT_STORE_HOSTED=1 on every rank)"));
    if (!tcp.ok()) return tcp.status();
    store = std::move(tcp).value();
  } else if (StartsWith(url, "file://")) {
    std::string dir = url.substr(7);
    if (dir.empty() || dir[0] != '/')
      return Status::InvalidArgument(StrCat("COMMKIT_STORE='", url, "': use file:///absolute/path"));
    COMMKIT_ASSIGN_OR_RETURN(auto file, FileStore::Open(dir));
    store = std::move(file);
  } else if (StartsWith(url, "etcd://")) {
    COMMKIT_ASSIGN_OR_RETURN(StoreAddress a, ParseStoreAddress(std::string_view(url).substr(7), url));
    EtcdStoreOptions o;
    o.host = a.endpoint.host;
    o.port = a.endpoint.port;
    if (!a.path.empty()) o.prefix = a.path.back() == '/' ? a.path : a.path + "/";
    o.timeout = timeout;
    // A crashed run's keys vanish ten minutes after its last rank died (generations keep runs apart
    // meanwhile; docs/launchers.md).
    o.lease_ttl = std::chrono::minutes(10);
    COMMKIT_ASSIGN_OR_RETURN(auto etcd, EtcdStore::Connect(o));
    store = std::move(etcd);
  } else {
    return Status::InvalidArgument(
        StrCat("COMMKIT_STORE='", url, "' is not tcp://HOST:PORT, file:///DIR or etcd://HOST:PORT[/PREFIX]"));
  }
  store->set_timeout(timeout);
  return store;
}

namespace {

// Rank 0 of an Open MPI job told only mpirun's address must really be on mpirun's host: binding a
// socket to the address succeeds only where it is local.
Status CheckMasterIsLocal(const LaunchInfo& info) {
  struct addrinfo hints {};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  struct addrinfo* res = nullptr;
  if (::getaddrinfo(info.master_addr.c_str(), "0", &hints, &res) != 0) return Status::Ok();
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool local = fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (local) return Status::Ok();
  return Status::InvalidArgument(StrCat("rank 0 is not on mpirun's host ", info.master_addr,
                                           " (OMPI_MCA_orte_hnp_uri), where the other ranks look for the store: set "
                                           "MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)"));
}

}  // namespace

Result<Rendezvous> RendezvousFromEnvironment(const EnvMap& env, const RendezvousOptions& options) {
  Rendezvous rdzv;
  COMMKIT_ASSIGN_OR_RETURN(rdzv.info, DetectLaunchEnvironment(env));
  const LaunchInfo& info = rdzv.info;
  std::string who = StrCat("rank ", info.rank, "/", info.world_size);
  SetLogRank(info.rank, info.world_size);
  COMMKIT_LOG_INFO("launch: ", info.Describe());

  std::chrono::milliseconds timeout = options.timeout;
  if (auto it = env.find("COMMKIT_RENDEZVOUS_TIMEOUT"); it != env.end()) {
    auto parsed = ParseDuration(it->second);
    if (!parsed.ok()) return parsed.status().WithContext("COMMKIT_RENDEZVOUS_TIMEOUT");
    timeout = *parsed;
  }
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  bool hosted = env.count("COMMKIT_STORE_HOSTED") && env.at("COMMKIT_STORE_HOSTED") == "1";
  std::string token = StoreTokenFromEnvironment(env, info);
  std::string url;
  if (auto it = env.find("COMMKIT_STORE"); it != env.end() && !it->second.empty()) url = it->second;
  // A store this job started (rank 0's server, or commkit-run's) holds only this run's keys; any
  // other store may hold earlier runs' keys and gets a run namespace and a generation.
  bool own_store = false;
  std::shared_ptr<Store> base;
  if (url.empty() && !hosted) {
    if (info.rank == 0 && info.master_from_mpirun) COMMKIT_RETURN_IF_ERROR(CheckMasterIsLocal(info).WithContext(who));
    JobStoreOptions jo;
    jo.host = info.master_addr;
    jo.ports = StorePortCandidates(info.master_port, env);
    jo.is_server = info.rank == 0;
    bool loopback = info.master_addr == "localhost" || StartsWith(info.master_addr, "127.") || info.master_addr == "::1";
    jo.bind_host = loopback ? "127.0.0.1" : "0.0.0.0";
    jo.token = token;
    jo.timeout = timeout;
    auto tcp = OpenJobTcpStore(jo);
    if (!tcp.ok()) return tcp.status().WithContext(StrCat(who, ": rendezvous"));
    (*tcp)->set_timeout(timeout);
    base = std::move(tcp).value();
    own_store = true;
  } else {
    if (url.empty())
      url = StrCat("tcp://", FormatHostPort(info.master_addr, info.master_port));
    auto store = OpenStore(url, info, token, hosted, timeout);
    if (!store.ok()) return store.status().WithContext(StrCat(who, ": rendezvous"));
    base = std::move(store).value();
    // commkit-run's hosted store is started per launch; rank 0's own server likewise.
    own_store = StartsWith(url, "tcp://") &&
                (!hosted || (env.count("COMMKIT_LAUNCHER") && env.at("COMMKIT_LAUNCHER") == "commkit-run"));
  }
  if (own_store) {
    rdzv.store = base;
  } else {
    auto run_store = std::make_shared<PrefixStore>(StrCat("run-", info.run_id.empty() ? "default" : info.run_id), base);
    auto gen = JoinRunGeneration(run_store, info, left());
    if (!gen.ok()) return gen.status().WithContext(who);
    rdzv.store = gen->store;
    rdzv.generation = gen->generation;
    rdzv.store->set_timeout(timeout);
    if (!options.wait_for_all) return rdzv;
    // Announce and wait, moving to a newer generation when rank 0 of this run opens one (this rank
    // may have joined a previous run's unfinished generation before this run's rank 0 arrived).
    // Only rank 0's "rdzv/done" completes a rendezvous here: old announcements alone never do.
    std::vector<std::string> keys;
    for (int r = 0; r < info.world_size; ++r) keys.push_back(StrCat("rdzv/rank/", r));
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    while (true) {
      COMMKIT_RETURN_IF_ERROR(rdzv.store->Set(StrCat("rdzv/rank/", info.rank), StrCat(host, " pid ", ::getpid()))
                                  .WithContext(StrCat(who, ": rendezvous")));
      const std::vector<std::string> awaited = info.rank == 0 ? keys : std::vector<std::string>{"rdzv/done"};
      bool moved = false;
      Status waited;
      while (true) {
        waited = rdzv.store->Wait(awaited, std::min(left(), std::chrono::milliseconds(500)));
        if (waited.ok() || waited.code() != StatusCode::kTimeout || Clock::now() >= deadline) break;
        if (info.rank == 0) continue;
        auto current = run_store->Add("gen/current", 0);
        if (current.ok() && *current > rdzv.generation) {
          COMMKIT_LOG_INFO("rendezvous: generation ", rdzv.generation, " was a previous run's; moving to ", *current);
          auto gen2 = JoinRunGeneration(run_store, info, left());
          if (!gen2.ok()) return gen2.status().WithContext(who);
          rdzv.store = gen2->store;
          rdzv.generation = gen2->generation;
          rdzv.store->set_timeout(timeout);
          moved = true;
          break;
        }
      }
      if (moved) continue;
      if (!waited.ok()) return MissingRanks(waited, *rdzv.store, info, who, timeout);
      if (info.rank == 0) COMMKIT_RETURN_IF_ERROR(rdzv.store->Set("rdzv/done", "1").WithContext(who));
      COMMKIT_ASSIGN_OR_RETURN(auto values, rdzv.store->MultiGet(keys, left()));
      for (auto& v : values) rdzv.hosts.push_back(v.substr(0, v.find(" pid ")));
      return rdzv;
    }
  }
  if (!options.wait_for_all) return rdzv;

  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  COMMKIT_RETURN_IF_ERROR(rdzv.store->Set(StrCat("rdzv/rank/", info.rank), StrCat(host, " pid ", ::getpid()))
                              .WithContext(StrCat(who, ": rendezvous")));
  std::vector<std::string> keys;
  for (int r = 0; r < info.world_size; ++r) keys.push_back(StrCat("rdzv/rank/", r));
  Status waited = rdzv.store->Wait(keys, left());
  if (!waited.ok()) return MissingRanks(waited, *rdzv.store, info, who, timeout);
  COMMKIT_ASSIGN_OR_RETURN(auto values, rdzv.store->MultiGet(keys, left()));
  for (auto& v : values) rdzv.hosts.push_back(v.substr(0, v.find(" pid ")));
  return rdzv;
}

Result<Rendezvous> RendezvousFromEnvironment(const RendezvousOptions& options) {
  return RendezvousFromEnvironment(CurrentEnvironment(), options);
}

}  // namespace commkit
