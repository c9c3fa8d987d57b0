// gpudoctor cluster mode: gather node reports through the store, probe TCP connectivity and bandwidth
// between every ordered pair of ranks on the interface NCCL would pick, and build one report.
#include "commkit/diagnostics/cluster.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "commkit/common/host_port.h"
#include "commkit/common/log.h"
#include "commkit/common/socket.h"
#include "commkit/common/strings.h"
#include "commkit/topology/nccl_libraries.h"
#include "commkit/topology/netif.h"
#include "commkit/topology/probe.h"
#include "../check_support.h"

namespace commkit::diagnostics {
namespace {

using Clock = net::Clock;
using nlohmann::json;

// Probe protocol: client sends 8-byte big-endian length L (capped), then L bytes; server replies 1 byte.
constexpr std::int64_t kMaxProbeBytes = 256 << 20;

class ProbeServer {
 public:
  ~ProbeServer() { Stop(); }
  Status Start(const std::string& address, std::chrono::milliseconds io_timeout) {
    io_timeout_ = io_timeout;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(address.c_str(), "0", &hints, &res); rc != 0)
      return Status::InvalidArgument(StrCat("gpudoctor cluster: cannot listen on '", address, "': ", gai_strerror(rc)));
    fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = fd_ < 0 ? -1 : ::bind(fd_, res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (rc != 0 || ::listen(fd_, 128) != 0)
      return Status::Unavailable(StrCat("gpudoctor cluster: cannot listen on ", address, ": ", std::strerror(errno)));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }
  int port() const { return port_; }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& t : workers_) t.join();
    workers_.clear();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) continue;
      workers_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    net::Socket socket(c);
    auto deadline = Clock::now() + io_timeout_ * 4;
    unsigned char hdr[8];
    if (!net::RecvExact(c, reinterpret_cast<char*>(hdr), 8, deadline).ok()) return;
    std::int64_t n = 0;
    for (unsigned char b : hdr) n = (n << 8) | b;
    if (n < 0 || n > kMaxProbeBytes) return;
    std::vector<char> buf(1 << 16);
    while (n > 0 && !stop_) {
      const auto chunk = static_cast<std::size_t>(std::min<std::int64_t>(n, static_cast<std::int64_t>(buf.size())));
      if (!net::RecvExact(c, buf.data(), chunk, deadline).ok()) return;
      n -= static_cast<std::int64_t>(chunk);
    }
    if (n == 0) (void)net::SendAll(c, "k", deadline);
  }
  int fd_ = -1;
  int port_ = 0;
  std::chrono::milliseconds io_timeout_{3000};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> workers_;  // touched only by thread_ until Stop joins it
};

ClusterLink Probe(int from, int to, const std::string& target, std::int64_t bytes, std::chrono::milliseconds timeout) {
  ClusterLink link{from, to, false, "", 0};
  auto hp = ParseHostPort(target);
  if (!hp.ok()) {
    link.error = StrCat("bad peer address: ", hp.status().message());
    return link;
  }
  auto fd = net::ConnectWithDeadline(hp->host, hp->port, Clock::now() + timeout);
  if (!fd.ok()) {
    link.error = fd.status().message();
    return link;
  }
  net::Socket socket(*fd);
  unsigned char hdr[8];
  for (int i = 0; i < 8; ++i) hdr[i] = static_cast<unsigned char>(bytes >> (8 * (7 - i)));
  auto start = Clock::now();
  auto xfer_deadline = start + timeout * 4;
  Status s = net::SendAll(*fd, std::string_view(reinterpret_cast<char*>(hdr), 8), xfer_deadline);
  std::vector<char> buf(1 << 16, 'x');
  for (std::int64_t left = bytes; s.ok() && left > 0;) {
    std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(left, static_cast<std::int64_t>(buf.size())));
    s = net::SendAll(*fd, std::string_view(buf.data(), n), xfer_deadline);
    left -= static_cast<std::int64_t>(n);
  }
  char ack = 0;
  if (s.ok()) s = net::RecvExact(*fd, &ack, 1, xfer_deadline);
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  link.ok = true;  // connected: the connectivity matrix cell passes
  if (!s.ok() || ack != 'k') link.error = "connected, but the bandwidth transfer did not complete in time";
  else if (bytes > 0 && secs > 0) link.mbytes_per_s = static_cast<double>(bytes) / secs / 1e6;
  return link;
}

std::string ReadTrim(const SystemView& view, const std::string& path) {
  auto v = view.ReadFile(path, 1 << 16);
  return v.ok() ? std::string(Trim(*v)) : "";
}

json HostToJson(const ClusterHost& h, const std::string& report_json) {
  return json{{"rank", h.rank}, {"host", h.host}, {"listen", h.listen}, {"listen_error", h.listen_error},
              {"iface", h.iface}, {"facts", h.facts}, {"report", json::parse(report_json)}};
}

Report ReportFromJson(const json& j) {
  Report r;
  if (!j.contains("checks")) return r;
  for (const json& c : j["checks"]) {
    CheckRecord rec;
    rec.info.id = c.value("id", "");
    rec.info.title = c.value("title", "");
    rec.info.category = c.value("category", "");
    std::string st = c.value("result", "skip");
    rec.outcome.status = st == "pass" ? CheckStatus::kPass : st == "warn" ? CheckStatus::kWarn
                         : st == "fail" ? CheckStatus::kFail : CheckStatus::kSkip;
    rec.outcome.summary = c.value("summary", "");
    rec.outcome.fix = c.value("fix", "");
    if (c.contains("evidence") && c["evidence"].is_array())
      for (const json& e : c["evidence"]) rec.outcome.evidence.push_back(e.get<std::string>());
    r.records.push_back(std::move(rec));
  }
  return r;
}

std::string Key(const ClusterOptions& o, std::string_view what, int rank) {
  return StrCat("gpudoctor/", o.session, "/", what, "/", rank);
}

// Waits (bounded) for what/<r> for every rank; returns the values, empty for ranks that never came.
std::vector<std::optional<std::string>> Gather(Store& store, const ClusterOptions& o, std::string_view what) {
  std::vector<std::string> keys;
  for (int r = 0; r < o.world; ++r) keys.push_back(Key(o, what, r));
  std::vector<std::optional<std::string>> out(o.world);
  if (store.Wait(keys, o.timeout).ok()) {
    auto values = store.MultiGet(keys, std::chrono::milliseconds(1000));
    if (values.ok()) {
      for (int r = 0; r < o.world; ++r) out[r] = (*values)[r];
      return out;
    }
  }
  for (int r = 0; r < o.world; ++r) {
    auto present = store.Check({keys[r]});
    if (present.ok() && *present) {
      auto v = store.Get(keys[r], std::chrono::milliseconds(1000));
      if (v.ok()) out[r] = *v;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> CollectClusterFacts(const CheckContext& context, std::string* chosen_iface,
                                                       std::string* chosen_address) {
  const SystemView& view = *context.system;
  std::map<std::string, std::string> facts;
  const std::map<std::string, std::string> env = internal::NodeEnv(context);
  for (const auto& [name, value] : env)
    if (StartsWith(name, "NCCL_") || StartsWith(name, "FI_")) facts["env." + name] = value;
  std::string drv = ReadTrim(view, "/proc/driver/nvidia/version");
  if (!drv.empty()) facts["nvidia.driver"] = std::string(Trim(Split(drv, '\n', true).front()));
  if (const auto& topo = context.topology(); topo.ok() && topo->gpu.nvml_available && topo->gpu.cuda_driver_version > 0) {
    const int v = topo->gpu.cuda_driver_version;  // 12040
    facts["cuda.driver_version"] = StrCat(v / 1000, ".", v % 1000 / 10);
  }
  const topology::NcclLibraries nccl = topology::FindNcclLibraries(view, env);
  if (std::string v = topology::NcclVersionFact(nccl); !v.empty()) facts["nccl.version"] = v;
  facts["nccl.net_plugins"] = topology::NcclNetPluginsFact(nccl);
  auto net = topology::ProbeNetwork(view);
  if (net.ok()) {
    std::vector<std::string> names;
    for (const auto& nif : net->interfaces)
      if (!nif.loopback) names.push_back(nif.name);
    facts["net.interfaces"] = Join(names, ",");
    topology::NcclSocketChoice choice =
        topology::PredictNcclSocketInterfaces(*net, topology::NcclSocketOptions::FromEnvironment());
    if (choice.found()) {
      const auto& sel = choice.selected.front();
      facts["net.nccl_iface"] = sel.ifname;
      if (const auto* nif = net->Find(sel.ifname)) facts["net.nccl_iface.mtu"] = std::to_string(nif->mtu);
      if (chosen_iface) *chosen_iface = sel.ifname;
      if (chosen_address) *chosen_address = sel.address;
    } else {
      facts["net.nccl_iface"] = "(none: " + choice.rule + ")";
    }
  }
  auto ib = view.ListDir("/sys/class/infiniband");
  if (ib.ok()) {
    std::vector<std::string> ports;
    for (const std::string& dev : *ib) {
      auto ps = view.ListDir("/sys/class/infiniband/" + dev + "/ports");
      if (!ps.ok()) continue;
      for (const std::string& p : *ps) {
        std::string base = "/sys/class/infiniband/" + dev + "/ports/" + p + "/";
        ports.push_back(StrCat(dev, ":", p, " ", ReadTrim(view, base + "link_layer"), " ", ReadTrim(view, base + "rate")));
      }
    }
    std::sort(ports.begin(), ports.end());
    facts["ib.ports"] = Join(ports, "; ");
  }
  return facts;
}

Result<std::optional<ClusterReport>> RunCluster(Store& store, const CheckRegistry& registry,
                                                const CheckContext& context, const ClusterOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    return Status::InvalidArgument(StrCat("gpudoctor cluster: rank ", o.rank, " is not in [0, ", o.world, ")"));
  ClusterHost me;
  me.rank = o.rank;
  me.arrived = true;
  char hn[256] = {};
  ::gethostname(hn, sizeof hn - 1);
  me.host = hn;
  std::string address;
  me.report = RunChecks(registry, context, o.selection);
  // After the checks: cuda.driver_version comes from the topology probe they share (NVML asked once).
  me.facts = CollectClusterFacts(context, &me.iface, &address);
  if (!o.listen_address.empty()) address = o.listen_address;
  for (const CheckRecord& r : me.report.records)
    if (r.info.id == "gpu.driver" || r.info.id == "nccl.libs") me.facts["check." + r.info.id] = r.outcome.summary;

  ProbeServer server;
  if (address.empty()) {
    me.listen_error = "NCCL would find no socket interface on this host";
  } else if (Status s = server.Start(address, o.connect_timeout); !s.ok()) {
    me.listen_error = s.message();
  } else {
    me.listen = FormatHostPort(address, server.port());
  }
  COMMKIT_RETURN_IF_ERROR(store.Set(Key(o, "node", o.rank), HostToJson(me, me.report.ToJson()).dump()));

  std::vector<std::optional<std::string>> nodes = Gather(store, o, "node");
  std::vector<ClusterHost> hosts(o.world);
  for (int r = 0; r < o.world; ++r) {
    hosts[r].rank = r;
    if (!nodes[r]) continue;
    json j = json::parse(*nodes[r], nullptr, false);
    if (!j.is_object()) continue;
    try {  // another rank's entry with fields of the wrong type counts as not arrived
      ClusterHost h;
      h.rank = r;
      h.arrived = true;
      h.host = j.value("host", "");
      h.listen = j.value("listen", "");
      h.listen_error = j.value("listen_error", "");
      h.iface = j.value("iface", "");
      if (j.contains("facts")) h.facts = j["facts"].get<std::map<std::string, std::string>>();
      if (j.contains("report")) h.report = ReportFromJson(j["report"]);
      hosts[r] = std::move(h);
    } catch (const json::exception& e) {
      COMMKIT_LOG_WARN("gpudoctor cluster: rank ", r, "'s entry is malformed (", e.what(), "); counted as not arrived");
    }
  }

  // Probe every other rank that arrived, one at a time (bounded per peer).
  json my_links = json::array();
  for (int r = 0; r < o.world; ++r) {
    if (r == o.rank || !hosts[r].arrived) continue;
    ClusterLink link{o.rank, r, false, "", 0};
    if (hosts[r].listen.empty()) link.error = "peer is not listening: " + hosts[r].listen_error;
    else link = Probe(o.rank, r, hosts[r].listen, o.bandwidth_bytes, o.connect_timeout);
    my_links.push_back({{"from", link.from}, {"to", link.to}, {"ok", link.ok}, {"error", link.error},
                        {"mbytes_per_s", link.mbytes_per_s}});
  }
  COMMKIT_RETURN_IF_ERROR(store.Set(Key(o, "links", o.rank), my_links.dump()));
  // Keep serving until every rank finished probing (bounded), so late probers still find us.
  std::vector<std::optional<std::string>> link_sets = Gather(store, o, "links");
  server.Stop();
  if (o.rank != 0) return std::optional<ClusterReport>();

  std::vector<ClusterLink> links;
  for (int r = 0; r < o.world; ++r) {
    if (!link_sets[r]) continue;
    json j = json::parse(*link_sets[r], nullptr, false);
    if (!j.is_array()) continue;
    for (const json& l : j) {
      try {
        ClusterLink link{l.value("from", 0), l.value("to", 0), l.value("ok", false), l.value("error", ""),
                         l.value("mbytes_per_s", 0.0)};
        if (link.from >= 0 && link.from < o.world && link.to >= 0 && link.to < o.world) links.push_back(link);
      } catch (const json::exception&) {
        COMMKIT_LOG_WARN("gpudoctor cluster: rank ", r, " reported a malformed link entry; ignored");
      }
    }
  }
  return std::optional<ClusterReport>(BuildClusterReport(std::move(hosts), std::move(links)));
}

}  // namespace commkit::diagnostics
