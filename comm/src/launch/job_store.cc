// The job's TcpStore on MASTER_PORT or the next free port: coexisting with torchrun's own store (or
// anything else) on MASTER_PORT without extra configuration. Every rank applies the same rule, so
// they agree on the port without talking: rank 0 binds the first candidate that is free; the others
// probe the candidates in order and use the first that speaks commkit's protocol and accepts the
// job's token. A candidate with nothing listening does not end a round of probes: a port can be
// impossible to bind without a listener on it (the local port of another program's outgoing
// connection, a socket bound but not listening), and rank 0 then moves past it.
#include <thread>

#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCandidates = 8;
// A server of another protocol may never answer commkit's hello; torchrun's TCPStore closes at once.
constexpr auto kProbeHandshake = std::chrono::seconds(2);
constexpr auto kProbeConnect = std::chrono::milliseconds(500);
// The candidates after one with nothing listening: a refusal comes back within a round trip.
constexpr auto kProbeConnectPastAGap = std::chrono::milliseconds(60);

bool InUse(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.message().find("already in use") != std::string::npos;
}
bool NothingListening(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.message().find("cannot connect") != std::string::npos;
}

std::string PortRange(const std::vector<int>& ports) {
  if (ports.empty()) return "(none)";
  return ports.size() == 1 ? std::to_string(ports.front()) : StrCat(ports.front(), "-", ports.back());
}

}  // namespace

std::vector<int> StorePortCandidates(int master_port, const EnvMap& env) {
  int first = master_port;
  // torchrun >= 2.4 hosts its TCPStore on MASTER_PORT for the workers and says so.
  if (auto it = env.find("TORCHELASTIC_USE_AGENT_STORE"); it != env.end() && ToLower(it->second) == "true") ++first;
  std::vector<int> ports;
  for (int p = first; p < first + kCandidates && p <= 65535; ++p) ports.push_back(p);
  return ports;
}

Result<std::unique_ptr<TcpStore>> OpenJobTcpStore(const JobStoreOptions& o) {
  if (o.ports.empty()) return Status::InvalidArgument("job store: no candidate ports");
  std::vector<std::string> skipped;
  if (o.is_server) {
    for (int port : o.ports) {
      TcpStoreOptions t;
      t.host = o.host.empty() ? "127.0.0.1" : o.host;  // the first client call checks the server answers there
      t.port = port;
      t.token = o.token;
      t.is_server = true;
      t.bind_host = o.bind_host;
      t.timeout = o.timeout;
      t.connect_timeout = std::chrono::seconds(10);
      auto store = TcpStore::Create(t);
      if (store.ok()) {
        if (port != o.ports.front())
          COMMKIT_LOG_INFO("job store: port ", o.ports.front(), " is taken (", Join(skipped, "; "), "); using ", port,
                           " (every rank finds it the same way)");
        return store;
      }
      if (!InUse(store.status())) return store.status();
      skipped.push_back(StrCat(port, " in use"));
    }
    return Status::Unavailable(StrCat("job store: ports ", PortRange(o.ports), " on ", o.bind_host,
                                      " are all in use by other servers; set MASTER_PORT to a free port (the job uses "
                                      "it or one of the 7 after it) or COMMKIT_STORE=tcp://HOST:PORT on every rank"));
  }
  auto deadline = Clock::now() + o.timeout;
  auto pause = std::chrono::milliseconds(20);
  while (true) {
    skipped.clear();
    bool none_listening = false;
    for (int port : o.ports) {
      TcpStoreOptions t;
      t.host = o.host;
      t.port = port;
      t.token = o.token;
      t.timeout = o.timeout;
      t.connect_timeout = none_listening ? kProbeConnectPastAGap : kProbeConnect;
      t.handshake_timeout = kProbeHandshake;
      auto store = TcpStore::Create(t);
      if (store.ok()) return store;
      if (NothingListening(store.status())) {
        // Rank 0's store may not be up yet, or rank 0 could not bind this port although nothing
        // listens on it: go on with the next candidates, then look again from the start.
        none_listening = true;
        skipped.push_back(StrCat(port, ": nothing listening yet"));
        continue;
      }
      skipped.push_back(StrCat(port, ": ", store.status().message()));
    }
    if (Clock::now() + pause >= deadline) {
      return Status::Unavailable(StrCat(
          "job store: no store of this job on ", o.host, " ports ", PortRange(o.ports), " within ",
          HumanSeconds(o.timeout.count() / 1000.0), " [", Join(skipped, "; "), "]. ",
          none_listening ? "Is rank 0 running, and can this host reach it?"
                         : "Every candidate port is held by another server or job; set MASTER_PORT to a free port "
                           "or COMMKIT_STORE=tcp://HOST:PORT on every rank."));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace commkit
