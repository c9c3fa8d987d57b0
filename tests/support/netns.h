// Network-namespace "hosts" for tests (label netns): a switch namespace with a bridge and one
// namespace per host, joined by a veth pair whose host end gets the name, address and MTU asked for.
// Only addresses the test passes in (10.213.x.y) are used; nothing is created in the caller's own
// namespace. The lab deletes every namespace it created on destruction (their veths go with them).
// Not thread-safe; every command is bounded by `timeout`.
#pragma once

#include <string>
#include <vector>

namespace commkit::testing {

// "" when namespace tests can run here; otherwise why not (not root, no `ip netns`, no bridge support).
std::string NetnsUnavailableReason();

struct NetnsHost {
  std::string name;            // short, [a-z0-9]: "a", "b"
  std::string ifname = "eth0";  // name of the host's interface on the bridge ("docker0" to mislead NCCL)
  std::string address;         // "10.213.1.2/24"
  int mtu = 1500;              // host side only; the switch side stays at 1500 (an MTU mismatch)
  std::string hostname;        // for Exec's UTS namespace; default "ns-<name>". Every lab host's
                               // /etc/hosts (/etc/netns/<ns>/hosts, which `ip netns exec` mounts)
                               // maps every host name to its address.
};

class NetnsLab {
 public:
  NetnsLab();   // names are "ck<pid>-<name>" so parallel tests never collide
  ~NetnsLab();  // deletes the namespaces (best effort, never throws)
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  // Creates the host's namespace, its veth to the bridge, address and MTU; lo up. False + error.
  bool AddHost(const NetnsHost& host, std::string* error);
  // Runs `command` in the host's namespace (shell), with its own host name. False + output on failure.
  bool Run(const std::string& host, const std::string& command, std::string* error);
  // The shell prefix that runs a command in the host's namespace with its own host name.
  std::string Exec(const std::string& host) const;
  std::string Namespace(const std::string& host) const;

 private:
  bool Sh(const std::string& command, std::string* error);
  bool WriteHostsFiles(std::string* error);
  std::string prefix_;
  std::vector<std::string> namespaces_;  // created, in order (switch first)
  std::vector<NetnsHost> hosts_;
  int next_port_ = 0;
};

}  // namespace commkit::testing
