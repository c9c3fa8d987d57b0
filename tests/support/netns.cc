#include "netns.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace commkit::testing {
namespace {
// Single-quotes `s` for sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string NetnsUnavailableReason() {
  if (::geteuid() != 0) return "network-namespace tests need root (they create namespaces and veths)";
  CommandResult r = RunCommand("timeout 10 ip netns list 2>&1");
  if (r.exit_code != 0) return "`ip netns` is unavailable: " + r.output;
  std::string probe = "ck" + std::to_string(::getpid()) + "-probe";
  r = RunCommand("timeout 10 sh -c 'ip netns add " + probe + " && ip -n " + probe + " link add br0 type bridge' 2>&1");
  RunCommand("timeout 10 ip netns del " + probe + " 2>/dev/null");
  if (r.exit_code != 0) return "cannot create a namespace with a bridge: " + r.output;
  return "";
}

NetnsLab::NetnsLab() : prefix_("ck" + std::to_string(::getpid()) + "-") {}

NetnsLab::~NetnsLab() {
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    RunCommand("timeout 10 ip netns del " + *it + " 2>/dev/null");
    std::error_code ec;
    std::filesystem::remove_all("/etc/netns/" + *it, ec);
  }
  std::error_code ec;
  if (!hosts_.empty()) std::filesystem::remove("/etc/netns", ec);  // only when empty (fails otherwise)
}

bool NetnsLab::WriteHostsFiles(std::string* error) {
  std::string text = "127.0.0.1 localhost\n::1 localhost\n";
  for (const NetnsHost& h : hosts_) {
    std::string addr = h.address.substr(0, h.address.find('/'));
    text += addr + " " + (h.hostname.empty() ? "ns-" + h.name : h.hostname) + "\n";
  }
  for (const NetnsHost& h : hosts_) {
    std::filesystem::path dir = "/etc/netns/" + Namespace(h.name);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream out(dir / "hosts", std::ios::trunc);
    out << text;
    if (ec || !out) {
      if (error) *error = "cannot write " + (dir / "hosts").string();
      return false;
    }
  }
  return true;
}

std::string NetnsLab::Namespace(const std::string& host) const { return prefix_ + host; }

bool NetnsLab::Sh(const std::string& command, std::string* error) {
  CommandResult r = RunCommand("timeout 20 sh -c " + Quote(command) + " 2>&1");
  if (r.exit_code == 0) return true;
  if (error) *error = command + ": " + r.output;
  return false;
}

bool NetnsLab::AddHost(const NetnsHost& host, std::string* error) {
  const std::string sw = Namespace("sw");
  if (namespaces_.empty()) {
    if (!Sh("ip netns add " + sw, error)) return false;
    namespaces_.push_back(sw);
    if (!Sh("ip -n " + sw + " link add br0 type bridge && ip -n " + sw + " link set br0 up", error)) return false;
  }
  const std::string ns = Namespace(host.name);
  if (!Sh("ip netns add " + ns, error)) return false;
  namespaces_.push_back(ns);
  const std::string port = "p" + std::to_string(::getpid() % 100000) + "x" + std::to_string(next_port_++);
  const std::string mtu = std::to_string(host.mtu);
  return Sh("ip -n " + ns + " link add " + host.ifname + " type veth peer name " + port + " netns " + sw +
                " && ip -n " + sw + " link set " + port + " master br0 up" + " && ip -n " + ns + " link set " +
                host.ifname + " mtu " + mtu + " up" + " && ip -n " + ns + " addr add " + host.address + " dev " +
                host.ifname + " && ip -n " + ns + " link set lo up",
            error) &&
         (hosts_.push_back(host), WriteHostsFiles(error));
}

std::string NetnsLab::Exec(const std::string& host) const {
  std::string hostname = "ns-" + host;
  for (const NetnsHost& h : hosts_)
    if (h.name == host && !h.hostname.empty()) hostname = h.hostname;
  return "ip netns exec " + Namespace(host) + " unshare --uts sh -c 'hostname " + hostname + " && exec \"$0\" \"$@\"' ";
}

bool NetnsLab::Run(const std::string& host, const std::string& command, std::string* error) {
  CommandResult r = RunCommand("timeout 20 ip netns exec " + Namespace(host) + " sh -c " + Quote(command) + " 2>&1");
  if (r.exit_code == 0) return true;
  if (error) *error = "[" + host + "] " + command + ": " + r.output;
  return false;
}

}  // namespace commkit::testing
