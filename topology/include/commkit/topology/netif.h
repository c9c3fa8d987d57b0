// Network interfaces, routes, and NCCL's socket-interface selection (NCCL_SOCKET_IFNAME).
//
// ProbeNetwork reads /sys/class/net, /proc/net/route and /proc/net/ipv6_route through a SystemView,
// and the address list through the SystemView fact "getifaddrs" (so a capture replays exactly).
// The NCCL functions reproduce ncclFindInterfaces (src/misc/socket.cc): the same list syntax, the
// same automatic order (ib*, then "^docker,lo", then docker*, then lo) and the same "first address
// of an interface in getifaddrs order" rule, which is why IPv4 wins over IPv6 on Linux.
// All functions are pure or read only through the view; thread-safe for distinct arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/common/system_view.h"

namespace commkit::topology {

enum class AddressFamily : std::uint8_t { kIPv4, kIPv6 };
std::string_view ToString(AddressFamily family);

struct InterfaceAddress {
  std::string ifname;
  AddressFamily family = AddressFamily::kIPv4;
  std::string address;  // textual, no prefix ("10.0.0.5", "fe80::1")
  int prefix_len = 0;
  bool link_local = false;  // fe80::/10 or 169.254/16
};

struct NetInterface {
  std::string name;
  std::string operstate;  // "up", "down", "unknown" (loopback, some virtual NICs)
  bool up = false;        // operstate up, or unknown with carrier 1
  bool loopback = false;  // type 772
  bool is_virtual = false;  // no device link (under /sys/devices/virtual): veth, docker0, bridges, lo
  bool is_bond = false;
  std::string bond_master;          // "bond0" when this is a bond slave
  std::vector<std::string> bond_slaves;
  std::optional<std::int64_t> speed_mbps;  // absent when the driver reports -1 or nothing
  int mtu = 0;
  int arp_type = 0;  // /sys/class/net/X/type: 1 ether, 32 infiniband, 772 loopback
  std::string mac;
  std::string pci_address;  // "0000:00:05.0" when backed by a PCI function
  std::string driver;
  std::vector<InterfaceAddress> addresses;  // in getifaddrs order
};

struct Route {
  AddressFamily family = AddressFamily::kIPv4;
  std::string ifname;
  std::string destination;  // "0.0.0.0" for the default route
  int prefix_len = 0;
  std::string gateway;  // empty when directly connected
  std::uint32_t metric = 0;
  bool is_default() const { return prefix_len == 0; }
};

struct NetworkInfo {
  std::vector<NetInterface> interfaces;  // sorted by name
  std::vector<InterfaceAddress> addresses;  // every address, getifaddrs order
  std::vector<Route> routes;
  std::vector<std::string> warnings;  // what could not be read, and why
  const NetInterface* Find(std::string_view name) const;
};

// Never fails for missing pieces (they become warnings); fails only when /sys/class/net is absent.
Result<NetworkInfo> ProbeNetwork(const SystemView& view);

// The live getifaddrs answer as fact text: one line per address "name family address prefix_len".
Result<std::string> GetIfaddrsFact();
// Parses that text (also for replay and tests).
Result<std::vector<InterfaceAddress>> ParseIfaddrsFact(std::string_view text);
// /proc/net/route and /proc/net/ipv6_route parsers; malformed lines are skipped.
std::vector<Route> ParseIPv4Routes(std::string_view proc_net_route);
std::vector<Route> ParseIPv6Routes(std::string_view proc_net_ipv6_route);

// ---- NCCL_SOCKET_IFNAME ----
// "eth,ib" (prefixes), "^docker,lo" (exclude prefixes), "=eth0" (exact), "^=eth0" (exclude exact).
// ":port" suffixes are accepted and ignored, as NCCL does for interface lists.
struct IfnameSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
};
IfnameSpec ParseIfnameSpec(std::string_view value);
bool MatchesIfnameSpec(const IfnameSpec& spec, std::string_view ifname);

struct NcclSocketOptions {
  std::optional<std::string> socket_ifname;  // NCCL_SOCKET_IFNAME
  std::optional<std::string> socket_family;  // NCCL_SOCKET_FAMILY: "AF_INET" or "AF_INET6"
  std::optional<std::string> comm_id;        // NCCL_COMM_ID "host:port" (subnet hint)
  int max_interfaces = 16;                    // MAX_IFS
  static NcclSocketOptions FromEnvironment();
};

struct NcclSocketChoice {
  std::vector<InterfaceAddress> selected;  // what NCCL would use, in order (bootstrap uses [0])
  std::string rule;                        // which rule matched: "NCCL_SOCKET_IFNAME=...", "ib", ...
  std::vector<std::string> notes;          // e.g. "eth0 is selected but its link is down"
  bool found() const { return !selected.empty(); }
};
NcclSocketChoice PredictNcclSocketInterfaces(const NetworkInfo& net, const NcclSocketOptions& options);

// The interface the kernel would use to reach `address` (longest prefix, then lowest metric).
// `address` may be a hostname-free IPv4/IPv6 literal; NotFound when no route matches,
// InvalidArgument when it is not an address literal.
struct RouteMatch {
  std::string ifname;
  Route route;
  bool loopback = false;  // the address is local (127/8, ::1, or one of this host's addresses)
};
Result<RouteMatch> InterfaceForAddress(const NetworkInfo& net, std::string_view address);

}  // namespace commkit::topology
