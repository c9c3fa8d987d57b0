#include "commkit/comm/rendezvous.h"

#include <unistd.h>

#include "commkit/comm/etcd_store.h"
#include "commkit/comm/file_store.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

struct HostPort {
  std::string host;
  int port = 0;
  std::string path;
};

Result<HostPort> ParseHostPort(std::string_view rest, std::string_view url) {
  HostPort hp;
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) hp.path = std::string(rest.substr(slash + 1));
  std::size_t colon;
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    auto close = authority.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument(StrCat("COMMKIT_STORE='", url, "': bad IPv6 address"));
    hp.host = std::string(authority.substr(1, close - 1));
    colon = authority.find(':', close);
  } else {
    colon = authority.rfind(':');
    hp.host = std::string(authority.substr(0, colon));
  }
  if (colon == std::string_view::npos || hp.host.empty())
    return Status::InvalidArgument(StrCat("COMMKIT_STORE='", url, "': expected HOST:PORT"));
  auto port = ParseInt(authority.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535)
    return Status::InvalidArgument(StrCat("COMMKIT_STORE='", url, "': port must be 1-65535"));
  hp.port = static_cast<int>(*port);
  return hp;
}

}  // namespace

Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const LaunchInfo& info, const std::string& token,
                                         bool hosted, std::chrono::milliseconds timeout) {
  std::shared_ptr<Store> store;
  if (StartsWith(url, "tcp://")) {
    COMMKIT_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(std::string_view(url).substr(6), url));
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
    COMMKIT_ASSIGN_OR_RETURN(auto tcp, TcpStore::Create(o));
    store = std::move(tcp);
  } else if (StartsWith(url, "file://")) {
    std::string dir = url.substr(7);
    if (dir.empty() || dir[0] != '/')
      return Status::InvalidArgument(StrCat("COMMKIT_STORE='", url, "': use file:///absolute/path"));
    COMMKIT_ASSIGN_OR_RETURN(auto file, FileStore::Open(dir));
    store = std::move(file);
  } else if (StartsWith(url, "etcd://")) {
    COMMKIT_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(std::string_view(url).substr(7), url));
    EtcdStoreOptions o;
    o.host = hp.host;
    o.port = hp.port;
    if (!hp.path.empty()) o.prefix = hp.path.back() == '/' ? hp.path : hp.path + "/";
    o.timeout = timeout;
    COMMKIT_ASSIGN_OR_RETURN(auto etcd, EtcdStore::Connect(o));
    store = std::move(etcd);
  } else {
    return Status::InvalidArgument(
        StrCat("COMMKIT_STORE='", url, "' is not tcp://HOST:PORT, file:///DIR or etcd://HOST:PORT[/PREFIX]"));
  }
  store->set_timeout(timeout);
  return store;
}

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
  std::string url = StrCat("tcp://", info.master_addr.find(':') != std::string::npos ? "[" + info.master_addr + "]"
                                                                                      : info.master_addr,
                           ":", info.master_port);
  if (auto it = env.find("COMMKIT_STORE"); it != env.end() && !it->second.empty()) url = it->second;
  bool hosted = env.count("COMMKIT_STORE_HOSTED") && env.at("COMMKIT_STORE_HOSTED") == "1";
  std::string token = StoreTokenFromEnvironment(env, info);
  auto store = OpenStore(url, info, token, hosted, timeout);
  if (!store.ok()) return store.status().WithContext(StrCat(who, ": rendezvous"));
  // A shared (file/etcd) store may hold several jobs: namespace by job id.
  rdzv.store = StartsWith(url, "tcp://") ? *store
                                        : std::make_shared<PrefixStore>(StrCat("job-", info.job_id.empty() ? "default" : info.job_id), *store);
  if (!options.wait_for_all) return rdzv;

  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  COMMKIT_RETURN_IF_ERROR(rdzv.store->Set(StrCat("rdzv/rank/", info.rank), StrCat(host, " pid ", ::getpid()))
                              .WithContext(StrCat(who, ": rendezvous")));
  std::vector<std::string> keys;
  for (int r = 0; r < info.world_size; ++r) keys.push_back(StrCat("rdzv/rank/", r));
  Status waited = rdzv.store->Wait(keys, timeout);
  if (!waited.ok()) {
    if (waited.code() != StatusCode::kTimeout) return waited.WithContext(StrCat(who, ": rendezvous"));
    std::vector<std::string> missing;
    for (int r = 0; r < info.world_size; ++r) {
      auto present = rdzv.store->Check({keys[r]});
      if (present.ok() && !*present) missing.push_back(std::to_string(r));
    }
    return Status::Timeout(StrCat(who, ": rendezvous: ranks [", Join(missing, ", "), "] of ", info.world_size,
                                  " did not arrive within ", HumanSeconds(timeout.count() / 1000.0), " at ",
                                  rdzv.store->Describe(), ". Check that every rank was started and can reach ",
                                  info.master_addr, ":", info.master_port));
  }
  COMMKIT_ASSIGN_OR_RETURN(auto values, rdzv.store->MultiGet(keys, timeout));
  for (auto& v : values) rdzv.hosts.push_back(v.substr(0, v.find(" pid ")));
  return rdzv;
}

Result<Rendezvous> RendezvousFromEnvironment(const RendezvousOptions& options) {
  return RendezvousFromEnvironment(CurrentEnvironment(), options);
}

}  // namespace commkit
