// Rules for TCP between ranks: the socket interface NCCL / Gloo use (missing, or a virtual / unroutable
// one), connections refused or closed, and the c10d rendezvous store (timeouts, its port in use).
#include <string>
#include <vector>

#include "commkit/common/strings.h"
#include "rules.h"

namespace commkit::diagnostics::explain {

namespace {

// Does an NCCL_SOCKET_IFNAME value (prefix list, ^exclusions, =exact) name one of `ifs`?
bool IfnameMatchesAny(std::string value, const std::vector<std::string>& ifs) {
  if (value.empty() || value.front() == '^') return true;  // exclusion lists cannot be checked this way
  bool exact = value.front() == '=';
  if (exact) value.erase(0, 1);
  for (const std::string& want : Split(value, ',', true))
    for (const std::string& have : ifs)
      if (exact ? have == want : have.rfind(want, 0) == 0) return true;
  return false;
}

// Gloo's tcp device resolves where to listen in one of three ways, each with its own failure
// (gloo/transport/tcp/device.cc): an interface name (GLOO_SOCKET_IFNAME) -> "Unable to find address for:
// <iface>"; a hostname, the default -> "Unable to find address for: <host>" or, when the name resolves to
// an address this host does not have, "Unable to find address for <host>; bind(2) for <addr> failed with";
// an address -> "Unable to find interface for: <addr>".
struct GlooLookup {
  enum Kind { kNone, kInterface, kHostname, kAddress } kind = kNone;
  std::string name;
  bool bind_failed = false;  // the hostname resolved, to an address that is not this host's
};

// Linux interface names as udev, the kernel and the usual virtual drivers make them (eth0, ens5, enp0s3,
// ib0, bond0, docker0, wlan0, hsn0, lo; veth and cali names end in hex). A short hostname ("node1") has
// none of these prefixes.
bool LooksLikeInterface(const std::string& n) {
  if (n == "lo") return true;
  if (n.empty() || n.size() > 15 || n.find_first_of(".:/") != std::string::npos) return false;
  for (const char* p : {"veth", "cali"})
    if (StartsWith(n, p)) return true;
  if (n.back() < '0' || n.back() > '9') return false;
  for (const char* p : {"eth", "en", "ib", "bond", "docker", "virbr", "br", "wl", "em", "hsn", "team", "vlan", "cni",
                        "tun", "tap"})
    if (StartsWith(n, p)) return true;
  return false;
}

GlooLookup ReadGlooLookup(const std::string& l, const std::string& ifname) {
  GlooLookup g;
  std::size_t at = l.find("unable to find address for");
  const bool address = at == std::string::npos;
  if (address) at = l.find("unable to find interface for");
  if (at == std::string::npos) return g;
  std::size_t i = l.find_first_not_of(": [", l.find("for", at) + 3);
  if (i == std::string::npos) return g;
  std::size_t e = l.find_first_of(" ;,]\t", i);
  g.name = l.substr(i, e == std::string::npos ? std::string::npos : e - i);
  while (!g.name.empty() && (g.name.back() == '.' || g.name.back() == '\'')) g.name.pop_back();
  if (g.name.empty()) return g;
  if (address) {
    g.kind = GlooLookup::kAddress;
    // NCCL's selector syntax (^exclude, =exact) is no hostname: it can only have come from GLOO_SOCKET_IFNAME.
  } else if (g.name[0] != '^' && g.name[0] != '=' && ToLower(ifname) != g.name &&
             (Contains(l, "bind(2)") || !LooksLikeInterface(g.name))) {
    g.kind = GlooLookup::kHostname;
    g.bind_failed = Contains(l, "bind(2)");
  } else {
    // PyTorch resolves an interface only when GLOO_SOCKET_IFNAME names one, so an interface name proves the
    // setting even where the log does not echo it.
    g.kind = GlooLookup::kInterface;
  }
  return g;
}

}  // namespace

bool NamesStore(const std::string& l) {
  return Any(l, {"tcpstore", "rendezvous", "master_port", "init_process_group", "server socket", "c10d store",
                 "main_process_port", "store = "});
}

bool ConnectFailure(const std::string& l) {
  return Any(l, {"connection refused", "no route to host", "connection timed out", "network is unreachable",
                 "call to connect", "connect to ", "failed to connect", "connect failed",
                 "software caused connection abort", "connection timeout", "connect: exceeded retries"});
}

void SocketRules(const LogContext& log, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  const LogFacts& f = log.facts;
  const std::string& ifname = log.ifname;
  bool store_ctx = log.store_ctx, single_host_log = log.single_host_log;
  // --- interfaces and sockets
  const GlooLookup gloo = ReadGlooLookup(l, ifname);
  if (gloo.kind == GlooLookup::kInterface && (gloo.name[0] == '^' || gloo.name[0] == '=')) {
    c.Hit("socket.ifname_missing", 92, true,
          "GLOO_SOCKET_IFNAME holds NCCL's selector syntax ('" + gloo.name + "'), which Gloo reads as an interface "
          "name: give Gloo interface names only (GLOO_SOCKET_IFNAME=eth0, or a comma list)", &m);
  } else if (gloo.kind == GlooLookup::kInterface) {
    c.Hit("socket.ifname_missing", 92, true,
          "Gloo was told to use interface '" + gloo.name + "' (GLOO_SOCKET_IFNAME), which has no address on this "
          "host", &m);
  } else if (gloo.kind == GlooLookup::kHostname) {
    c.Hit("socket.wrong_interface", 64, false,
          "Gloo had no interface set and resolved '" + gloo.name + "' to pick its address, which " +
              (gloo.bind_failed ? "is not an address of this host (stale /etc/hosts or DNS entry)"
                                : "did not resolve") +
              ": set GLOO_SOCKET_IFNAME to the interface the nodes share",
          &m);
  } else if (gloo.kind == GlooLookup::kAddress) {
    c.Hit("socket.wrong_interface", 62, false,
          "Gloo was given the address " + gloo.name + ", which no interface of this host has (a listen-anywhere "
          "address, or another host's): set GLOO_SOCKET_IFNAME / the master address to this host's interface", &m);
  } else if (Any(l, {"no socket interface found", "no usable interface", "no interface found",
                     "no socket interface"})) {
    bool proven = !ifname.empty() && !IfnameMatchesAny(ifname, f.interfaces);
    c.Hit("socket.ifname_missing", proven ? 92 : 72, proven,
          ifname.empty() ? "No network interface matches the socket interface setting"
                         : "NCCL_SOCKET_IFNAME=" + ifname + " names no interface with an address on this host",
          &m);
  }
  // EAFNOSUPPORT when NCCL creates its socket: the address family it picked is not available here
  // (no interface with an IPv4/IPv6 address, e.g. a container without a network).
  if (Contains(l, "socket creation failed") && Contains(l, "address family not supported"))
    c.Hit("socket.ifname_missing", 70, false, "NCCL could not create a socket for the address family of the "
          "interface it picked: no usable IP interface in this environment (container network, "
          "NCCL_SOCKET_IFNAME)", &m);
  if (Any(l, {"is neither af_inet", "unsupported address family", "unsupported ip family"})) {
    long long fam = -1;
    std::size_t at = l.find("family ");
    if (at != std::string::npos) fam = NumAt(l, at + 7);
    if (fam == 0 && ifname.empty()) {
      c.Hit("nccl.version_mismatch", 45, false, "A peer sent an address with family 0 (seen with mixed NCCL versions "
            "across nodes)", &m);
    } else {
      bool proven = !ifname.empty();
      c.Hit("socket.ifname_missing", proven ? 88 : 65, proven,
            (ifname.empty() ? std::string("No usable socket interface")
                            : "NCCL_SOCKET_IFNAME=" + ifname + " matches no usable interface") +
                ": NCCL connected with an uninitialised address (family " + std::to_string(fam) + ")",
            &m);
    }
  }
  bool connect_fail = ConnectFailure(l);
  bool peer_closed = Any(l, {"connection closed by remote peer", "connection closed by peer", "connection reset by "
                             "peer", "remote process exited", "remote peer closed", "broken pipe", "socket closed",
                             "peer has closed", "remote end closed",
                             // ncclRemoteError: NCCL's own code for "a remote process exited or the network failed"
                             "ncclremoteerror"});
  if (peer_closed)
    c.Hit("socket.peer_closed", 42, false, "The connection to a peer was closed: that peer (another rank) failed "
          "first; its log holds the real error", &m);
  else if (connect_fail && !store_ctx && !Contains(l, "ibv_"))
    c.Hit("socket.unreachable", 55, false, "Ranks cannot open TCP connections to each other (firewall, wrong "
          "address/route, or the peer is not listening)", &m);
  // Connecting to Docker's default bridge or to loopback across hosts: the peer advertised the wrong
  // interface's address.
  if (connect_fail && !Contains(l, "ibv_") &&
      Any(l, {" 172.17.", "<172.17.", "[172.17.", " 127.0.", "<127.0.", "[127.0."}) && !single_host_log)
    c.Hit("socket.wrong_interface", 66, false, "A peer advertised an address on Docker's default bridge or "
          "loopback (172.17.x / 127.x), which other hosts cannot reach", &m);
  // 127.0.1.1 is what Debian and Ubuntu's /etc/hosts map the machine's own hostname to: a rank that
  // resolves its hostname to advertise an address (Gloo without GLOO_SOCKET_IFNAME, MASTER_ADDR set to a
  // hostname) hands its peers loopback. Even a one-rank log that connects there shows that resolution.
  else if (connect_fail && Any(l, {" 127.0.1.1", "<127.0.1.1", "[127.0.1.1", "/127.0.1.1"}))
    c.Hit("socket.wrong_interface", 60, false, "A connection to 127.0.1.1 failed: the hostname resolves to "
          "loopback (the Debian/Ubuntu /etc/hosts entry), so the address a rank advertised is not reachable "
          "from the others (set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, or fix /etc/hosts)", &m);
  // IPv4 link-local (RFC 3927) addresses are never routed: a failed connect to one means an interface
  // such as a pod-identity or APIPA link was chosen, whatever the number of hosts.
  if (connect_fail && !Contains(l, "ibv_") && Any(l, {" 169.254.", "<169.254.", "[169.254.", "/169.254."}))
    c.Hit("socket.wrong_interface", 66, false, "A connection to a link-local address (169.254.x) failed: NCCL/Gloo "
          "used an interface whose address is not routable between hosts", &m);

}

void StoreRules(const LogContext& log, LineState& state, const LineView& v, Candidates& c) {
  const Message& m = v.m;
  const std::string& l = v.l;
  bool store_ctx = log.store_ctx;
  bool connect_fail = ConnectFailure(l);
  const bool names_store = NamesStore(l) || Contains(l, "[c10d]");
  // --- store / rendezvous
  // The bind failure is the store's when its line or the traceback just above it names the store: a
  // log about a distributed job also binds other ports (an inference server's HTTP port, a dashboard).
  if (Any(l, {"address already in use", "eaddrinuse", "errno: 98"})) {
    const bool near_store = names_store || (state.store_line > 0 && state.store_source == m.line->source &&
                                            m.line->number - state.store_line <= 12);
    const bool proven = store_ctx && near_store;
    c.Hit("store.port_in_use", proven ? 90 : store_ctx ? 74 : 60, proven,
          proven ? "The rendezvous store (TCPStore on MASTER_PORT) could not bind: the port is in use"
          : store_ctx ? "A listening socket could not bind (address already in use) in a log about the rendezvous "
                        "store; its line does not say which port"
                      : "A listening socket could not bind: address already in use",
          &m);
  }
  if (names_store) {
    state.store_line = m.line->number;
    state.store_source = m.line->source;
  }
  if (Any(l, {"waiting for clients", "clients joined"}))
    c.Hit("store.rendezvous_timeout", 88, false, "The store timed out waiting for ranks to join: not every rank "
          "reached init_process_group (wrong WORLD_SIZE / MASTER_ADDR, or ranks that crashed or never started)", &m);
  else if (Any(l, {"client socket has timed out", "rendezvoustimeouterror", "rendezvousconnectionerror",
                   "etcdconnectionfailed", "connection to etcd has failed", "socket timeout", "diststoreerror",
                   "wait timeout after", "timed out initializing process group", "store_based_barrier",
                   "failed to connect to any network address", "connection to the c10d store has failed",
                   "rendezvous timeout", "timed out waiting for"}) ||
           (connect_fail && store_ctx))
    c.Hit("store.rendezvous_timeout", 60, false, "Ranks could not reach the rendezvous store (MASTER_ADDR:MASTER_PORT)"
          " in time", &m);

}

}  // namespace commkit::diagnostics::explain
