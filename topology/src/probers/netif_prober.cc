// Network interface probing through a SystemView, route lookup, and NCCL_SOCKET_IFNAME prediction.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "commkit/common/host_port.h"
#include "commkit/common/strings.h"
#include "commkit/topology/netif.h"

#include "probers/probe_steps.h"

namespace commkit::topology {
namespace {

constexpr std::string_view kNetDir = "/sys/class/net";

bool IsLinkLocal(AddressFamily family, std::string_view address) {
  if (family == AddressFamily::kIPv4) return StartsWith(address, "169.254.");
  std::string lower = ToLower(address);
  return StartsWith(lower, "fe8") || StartsWith(lower, "fe9") || StartsWith(lower, "fea") ||
         StartsWith(lower, "feb");
}

// 16 bytes for both families (IPv4 in the first four).
struct Bin {
  AddressFamily family;
  std::array<unsigned char, 16> bytes{};
};

std::optional<Bin> ParseAddress(std::string_view text) {
  std::string s(text);
  // Strip a zone ("fe80::1%eth0").
  if (auto pct = s.find('%'); pct != std::string::npos) s.resize(pct);
  Bin bin{};
  if (inet_pton(AF_INET, s.c_str(), bin.bytes.data()) == 1) {
    bin.family = AddressFamily::kIPv4;
    return bin;
  }
  if (inet_pton(AF_INET6, s.c_str(), bin.bytes.data()) == 1) {
    bin.family = AddressFamily::kIPv6;
    return bin;
  }
  return std::nullopt;
}

bool PrefixMatches(const Bin& a, const Bin& b, int prefix_len) {
  for (int bit = 0; bit < prefix_len; ++bit) {
    const int byte = bit / 8;
    const int mask = 0x80 >> (bit % 8);
    if ((a.bytes[byte] & mask) != (b.bytes[byte] & mask)) return false;
  }
  return true;
}

std::string HexToIPv4(std::string_view hex) {
  // /proc/net/route stores addresses as host-order (little-endian on x86/arm64) hex words.
  auto value = std::strtoul(std::string(hex).c_str(), nullptr, 16);
  in_addr addr{};
  addr.s_addr = static_cast<in_addr_t>(value);
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, buf, sizeof(buf));
  return buf;
}

int MaskToPrefix(std::string_view hex) {
  auto value = static_cast<std::uint32_t>(std::strtoul(std::string(hex).c_str(), nullptr, 16));
  return __builtin_popcount(value);
}

std::string HexToIPv6(std::string_view hex) {
  in6_addr addr{};
  for (int i = 0; i < 16 && static_cast<std::size_t>(2 * i + 1) < hex.size(); ++i) {
    addr.s6_addr[i] = static_cast<unsigned char>(std::strtoul(std::string(hex.substr(2 * i, 2)).c_str(), nullptr, 16));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, &addr, buf, sizeof(buf));
  return buf;
}

std::vector<std::string> Fields(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

std::vector<InterfaceAddress> FindInterfaces(const NetworkInfo& net, const IfnameSpec& spec,
                                             std::optional<AddressFamily> family, int max_ifs) {
  std::vector<InterfaceAddress> out;
  for (const auto& addr : net.addresses) {
    if (static_cast<int>(out.size()) >= max_ifs) break;
    if (family && addr.family != *family) continue;
    // NCCL skips IPv6 link-local addresses (they need a scope id to be usable).
    if (addr.family == AddressFamily::kIPv6 && addr.link_local) continue;
    if (!MatchesIfnameSpec(spec, addr.ifname)) continue;
    bool dup = std::any_of(out.begin(), out.end(), [&](const auto& a) { return a.ifname == addr.ifname; });
    if (!dup) out.push_back(addr);
  }
  return out;
}

}  // namespace

std::string_view ToString(AddressFamily family) {
  return family == AddressFamily::kIPv4 ? "ipv4" : "ipv6";
}

const NetInterface* NetworkInfo::Find(std::string_view name) const {
  for (const auto& i : interfaces)
    if (i.name == name) return &i;
  return nullptr;
}

Result<std::string> GetIfaddrsFact() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Status::FromErrno(errno, "getifaddrs");
  std::string out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    const int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    int prefix = 0;
    if (fam == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, buf, sizeof(buf));
      if (ifa->ifa_netmask)
        prefix = __builtin_popcount(reinterpret_cast<sockaddr_in*>(ifa->ifa_netmask)->sin_addr.s_addr);
    } else {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, buf, sizeof(buf));
      if (ifa->ifa_netmask) {
        const auto* m = reinterpret_cast<sockaddr_in6*>(ifa->ifa_netmask)->sin6_addr.s6_addr;
        for (int i = 0; i < 16; ++i) prefix += __builtin_popcount(m[i]);
      }
    }
    out += StrCat(ifa->ifa_name, " ", fam == AF_INET ? "inet" : "inet6", " ", buf, " ", prefix, "\n");
  }
  freeifaddrs(list);
  return out;
}

Result<std::vector<InterfaceAddress>> ParseIfaddrsFact(std::string_view text) {
  std::vector<InterfaceAddress> out;
  int line_no = 0;
  for (const auto& line : Split(text, '\n', /*skip_empty=*/true)) {
    ++line_no;
    auto f = Fields(line);
    if (f.empty()) continue;
    if (f.size() != 4 || (f[1] != "inet" && f[1] != "inet6"))
      return Status::DataLoss(StrCat("getifaddrs fact line ", line_no, ": expected 'name inet|inet6 address prefix', got '", line, "'"));
    InterfaceAddress a;
    a.ifname = f[0];
    a.family = f[1] == "inet" ? AddressFamily::kIPv4 : AddressFamily::kIPv6;
    a.address = f[2];
    auto prefix = ParseInt(f[3]);
    if (!prefix || *prefix < 0 || *prefix > (a.family == AddressFamily::kIPv4 ? 32 : 128) || !ParseAddress(a.address))
      return Status::DataLoss(StrCat("getifaddrs fact line ", line_no, ": bad address or prefix in '", line, "'"));
    a.prefix_len = static_cast<int>(*prefix);
    a.link_local = IsLinkLocal(a.family, a.address);
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<Route> ParseIPv4Routes(std::string_view text) {
  std::vector<Route> out;
  for (const auto& line : Split(text, '\n', true)) {
    auto f = Fields(line);
    // Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT
    if (f.size() < 8 || f[0] == "Iface") continue;
    auto flags = std::strtoul(f[3].c_str(), nullptr, 16);
    if ((flags & 0x1) == 0) continue;  // RTF_UP
    Route r;
    r.family = AddressFamily::kIPv4;
    r.ifname = f[0];
    r.destination = HexToIPv4(f[1]);
    r.gateway = (flags & 0x2) ? HexToIPv4(f[2]) : "";
    r.metric = static_cast<std::uint32_t>(std::strtoul(f[6].c_str(), nullptr, 10));
    r.prefix_len = MaskToPrefix(f[7]);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Route> ParseIPv6Routes(std::string_view text) {
  std::vector<Route> out;
  for (const auto& line : Split(text, '\n', true)) {
    auto f = Fields(line);
    // dest plen src splen nexthop metric refcnt use flags iface
    if (f.size() < 10 || f[0].size() != 32 || f[4].size() != 32) continue;
    auto flags = std::strtoul(f[8].c_str(), nullptr, 16);
    if ((flags & 0x1) == 0 || f[9] == "lo") continue;  // not up; lo holds local/unreachable entries
    Route r;
    r.family = AddressFamily::kIPv6;
    r.ifname = f[9];
    r.destination = HexToIPv6(f[0]);
    r.prefix_len = static_cast<int>(std::strtoul(f[1].c_str(), nullptr, 16));
    r.gateway = (flags & 0x2) ? HexToIPv6(f[4]) : "";
    r.metric = static_cast<std::uint32_t>(std::strtoul(f[5].c_str(), nullptr, 16));
    out.push_back(std::move(r));
  }
  return out;
}

Result<NetworkInfo> ProbeNetwork(const SystemView& view) {
  NetworkInfo net;
  auto names = view.ListDir(kNetDir);
  if (!names.ok()) return names.status().WithContext("network probe: cannot list /sys/class/net");
  for (const auto& name : *names) {
    const std::string dir = StrCat(kNetDir, "/", name);
    if (!view.IsDirectory(dir)) continue;  // bonding_masters is a file
    NetInterface nif;
    nif.name = name;
    if (auto v = view.ReadAttr(dir + "/operstate"); v.ok()) nif.operstate = *v;
    if (auto v = view.ReadAttr(dir + "/type"); v.ok()) nif.arp_type = static_cast<int>(ParseInt(*v).value_or(0));
    if (auto v = view.ReadAttr(dir + "/mtu"); v.ok()) nif.mtu = static_cast<int>(ParseInt(*v).value_or(0));
    if (auto v = view.ReadAttr(dir + "/address"); v.ok()) nif.mac = *v;
    if (auto v = view.ReadAttr(dir + "/speed"); v.ok()) {
      auto s = ParseInt(*v);
      if (s && *s > 0) nif.speed_mbps = *s;
    }
    bool carrier = false;
    if (auto v = view.ReadAttr(dir + "/carrier"); v.ok()) carrier = *v == "1";
    nif.loopback = nif.arp_type == 772;
    nif.up = nif.operstate == "up" || (nif.operstate == "unknown" && (carrier || nif.loopback));
    if (auto real = view.RealPath(dir); real.ok()) {
      nif.is_virtual = StartsWith(*real, "/sys/devices/virtual/");
    }
    if (auto dev = view.RealPath(dir + "/device"); dev.ok()) {
      // .../0000:00:05.0 for PCI; virtio NICs hang below their PCI function (virtioN).
      auto parts = Split(*dev, '/', true);
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->size() == 12 && (*it)[4] == ':' && (*it)[7] == ':' && (*it)[10] == '.') {
          nif.pci_address = *it;
          break;
        }
      }
      if (auto drv = view.ReadLink(dir + "/device/driver"); drv.ok()) {
        auto p = Split(*drv, '/', true);
        if (!p.empty()) nif.driver = p.back();
      }
    } else if (!nif.loopback && !nif.is_virtual) {
      nif.is_virtual = true;  // no backing device
    }
    if (view.IsDirectory(dir + "/bonding")) {
      nif.is_bond = true;
      if (auto s = view.ReadAttr(dir + "/bonding/slaves"); s.ok()) nif.bond_slaves = Split(*s, ' ', true);
    }
    if (auto m = view.ReadLink(dir + "/master"); m.ok()) {
      auto p = Split(*m, '/', true);
      if (!p.empty()) nif.bond_master = p.back();
    }
    net.interfaces.push_back(std::move(nif));
  }

  auto fact = view.Fact("getifaddrs", GetIfaddrsFact);
  if (!fact.ok()) {
    net.warnings.push_back(StrCat("addresses unknown: ", fact.status().ToString()));
  } else if (auto parsed = ParseIfaddrsFact(*fact); !parsed.ok()) {
    net.warnings.push_back(StrCat("addresses unknown: ", parsed.status().ToString()));
  } else {
    net.addresses = std::move(*parsed);
    for (const auto& a : net.addresses)
      for (auto& nif : net.interfaces)
        if (nif.name == a.ifname) nif.addresses.push_back(a);
  }

  if (auto r = view.ReadFile("/proc/net/route"); r.ok()) {
    net.routes = ParseIPv4Routes(*r);
  } else {
    net.warnings.push_back(StrCat("IPv4 routes unknown: ", r.status().ToString()));
  }
  if (auto r = view.ReadFile("/proc/net/ipv6_route"); r.ok()) {
    auto v6 = ParseIPv6Routes(*r);
    net.routes.insert(net.routes.end(), v6.begin(), v6.end());
  }  // absent when IPv6 is disabled: not worth a warning
  return net;
}

IfnameSpec ParseIfnameSpec(std::string_view value) {
  IfnameSpec spec;
  if (!value.empty() && value[0] == '^') {
    spec.exclude = true;
    value.remove_prefix(1);
  }
  if (!value.empty() && value[0] == '=') {
    spec.exact = true;
    value.remove_prefix(1);
  }
  for (auto& item : Split(value, ',', true)) {
    if (auto colon = item.find(':'); colon != std::string::npos) item.resize(colon);
    if (!item.empty() && spec.names.size() < 16) spec.names.push_back(item);
  }
  return spec;
}

bool MatchesIfnameSpec(const IfnameSpec& spec, std::string_view ifname) {
  bool match = false;
  for (const auto& n : spec.names) {
    if (spec.exact ? ifname == n : StartsWith(ifname, n)) {
      match = true;
      break;
    }
  }
  return match != spec.exclude;
}

NcclSocketOptions NcclSocketOptions::FromEnvironment() {
  NcclSocketOptions o;
  if (const char* v = std::getenv("NCCL_SOCKET_IFNAME"); v && *v) o.socket_ifname = v;
  if (const char* v = std::getenv("NCCL_SOCKET_FAMILY"); v && *v) o.socket_family = v;
  if (const char* v = std::getenv("NCCL_COMM_ID"); v && *v) o.comm_id = v;
  return o;
}

NcclSocketChoice PredictNcclSocketInterfaces(const NetworkInfo& net, const NcclSocketOptions& options) {
  NcclSocketChoice choice;
  std::optional<AddressFamily> family;
  if (options.socket_family) {
    if (*options.socket_family == "AF_INET") family = AddressFamily::kIPv4;
    else if (*options.socket_family == "AF_INET6") family = AddressFamily::kIPv6;
    else choice.notes.push_back(StrCat("NCCL_SOCKET_FAMILY=", *options.socket_family,
                                       " is not AF_INET or AF_INET6; NCCL ignores it"));
  }
  const int max_ifs = std::max(1, options.max_interfaces);
  if (options.socket_ifname) {
    choice.rule = StrCat("NCCL_SOCKET_IFNAME=", *options.socket_ifname);
    choice.selected = FindInterfaces(net, ParseIfnameSpec(*options.socket_ifname), family, max_ifs);
    if (choice.selected.empty())
      choice.notes.push_back(StrCat("no interface with an address matches ", choice.rule,
                                    ": NCCL fails with 'Bootstrap : no socket interface found'"));
  } else {
    choice.rule = "ib";
    choice.selected = FindInterfaces(net, ParseIfnameSpec("ib"), family, max_ifs);
    if (choice.selected.empty() && options.comm_id) {
      // findInterfaceMatchSubnet: the first interface on the same subnet as NCCL_COMM_ID's host.
      auto endpoint = ParseHostPort(*options.comm_id, PortRule::kOptional);
      if (auto target = endpoint.ok() ? ParseAddress(endpoint->host) : std::nullopt) {
        for (const auto& a : net.addresses) {
          auto bin = ParseAddress(a.address);
          if (bin && bin->family == target->family && (!family || *family == a.family) &&
              PrefixMatches(*bin, *target, a.prefix_len)) {
            choice.selected.push_back(a);
            choice.rule = StrCat("subnet of NCCL_COMM_ID=", *options.comm_id);
            break;
          }
        }
      }
    }
    const char* fallbacks[] = {"^docker,lo", "docker", "lo"};
    for (const char* rule : fallbacks) {
      if (!choice.selected.empty()) break;
      choice.rule = rule;
      choice.selected = FindInterfaces(net, ParseIfnameSpec(rule), family, max_ifs);
    }
    if (choice.selected.empty()) {
      choice.rule = "none";
      choice.notes.push_back("no interface has a usable address: NCCL fails with 'no socket interface found'");
    }
  }
  for (const auto& a : choice.selected) {
    const NetInterface* nif = net.Find(a.ifname);
    if (nif == nullptr) continue;
    if (!nif->up && !nif->loopback)
      choice.notes.push_back(StrCat(a.ifname, " is selected but its link is ", nif->operstate.empty() ? "not up" : nif->operstate,
                                    ": connections through it will hang or time out"));
    if (nif->loopback)
      choice.notes.push_back(StrCat(a.ifname, " is loopback: other nodes cannot reach ", a.address));
    else if (nif->is_virtual && !nif->is_bond)
      choice.notes.push_back(StrCat(a.ifname, " is a virtual interface (bridge/veth/docker): peers on other hosts usually cannot reach it"));
  }
  return choice;
}

Result<RouteMatch> InterfaceForAddress(const NetworkInfo& net, std::string_view address) {
  auto target = ParseAddress(address);
  if (!target)
    return Status::InvalidArgument(StrCat("'", address, "' is not an IPv4 or IPv6 address literal; resolve the host name first"));
  RouteMatch match;
  // Local addresses first: the kernel routes them over lo.
  for (const auto& a : net.addresses) {
    auto bin = ParseAddress(a.address);
    if (bin && bin->family == target->family && bin->bytes == target->bytes) {
      match.ifname = a.ifname;
      match.loopback = true;
      match.route.family = a.family;
      match.route.ifname = a.ifname;
      match.route.destination = a.address;
      match.route.prefix_len = a.family == AddressFamily::kIPv4 ? 32 : 128;
      return match;
    }
  }
  if (target->family == AddressFamily::kIPv4 && target->bytes[0] == 127) {
    match.ifname = "lo";
    match.loopback = true;
    match.route.ifname = "lo";
    match.route.destination = "127.0.0.0";
    match.route.prefix_len = 8;
    return match;
  }
  const Route* best = nullptr;
  for (const auto& r : net.routes) {
    if (r.family != target->family) continue;
    auto dest = ParseAddress(r.destination);
    if (!dest || !PrefixMatches(*dest, *target, r.prefix_len)) continue;
    if (best == nullptr || r.prefix_len > best->prefix_len ||
        (r.prefix_len == best->prefix_len && r.metric < best->metric)) {
      best = &r;
    }
  }
  if (best == nullptr)
    return Status::NotFound(StrCat("no route to ", address, " in the routing table (", net.routes.size(), " routes)"));
  match.ifname = best->ifname;
  match.route = *best;
  const NetInterface* nif = net.Find(best->ifname);
  match.loopback = nif != nullptr && nif->loopback;
  return match;
}

// Interfaces and addresses (ProbeNetwork), each named onto the NIC node of its PCI function; a NIC
// without RDMA ports gets one Ethernet port from the interface's speed.
void ProbeNetworkInterfaces(ProbeContext& ctx) {
  const SystemView& view = ctx.view;
  ProbeReport& r = ctx.report;
  Topology& topo = ctx.report.topology;
  std::map<std::string, NodeId>& node_of_bdf = ctx.node_of_bdf;
  auto net = ProbeNetwork(view);
  if (!net.ok()) {
    ctx.AddStatus("network", ProberState::kFailed, net.status().message());
  } else {
    r.network = std::move(*net);
    for (const auto& w : r.network.warnings) r.warnings.push_back(StrCat("network: ", w));
    for (const auto& nif : r.network.interfaces) {
      if (nif.pci_address.empty()) continue;
      auto it = node_of_bdf.find(CanonicalBusId(nif.pci_address));
      if (it == node_of_bdf.end()) continue;
      Node& n = topo.node(it->second);
      if (n.kind != NodeKind::kNic) continue;
      n.nic.netdevs.push_back(nif.name);
      if (n.nic.name.empty() || n.nic.name == n.pci.bus_id) {
        n.nic.name = nif.name;
        n.label = nif.name;
      }
      if (n.nic.ports.empty() && nif.speed_mbps) {
        NicPort p;
        p.state = nif.up ? "ACTIVE" : "DOWN";
        p.link_layer = "Ethernet";
        p.speed_gbps = static_cast<double>(*nif.speed_mbps) / 1000;
        p.mtu = nif.mtu;
        n.nic.ports.push_back(p);
      }
    }
    ctx.AddStatus("network", ProberState::kOk, StrCat(r.network.interfaces.size(), " interface(s), ", r.network.addresses.size(), " address(es)"));
  }
}

}  // namespace commkit::topology
