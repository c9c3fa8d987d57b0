// Network endpoints written as text: "host", "host:port", "[v6]:port", "[v6]" and a bare IPv6
// literal ("fe80::1", "::1"). One parser and one formatter for every place that reads or prints one
// (store URLs, launcher variables, CLI flags, probe targets), so IPv6 is handled the same everywhere.
//
// A bare IPv6 literal never carries a port: "fe80::1:29500" is the address fe80::1:29500, as NCCL and
// getaddrinfo read it. Give a port to an IPv6 address with brackets: "[fe80::1]:29500".
#pragma once

#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

struct HostPort {
  std::string host;  // without brackets: "10.0.0.4", "node1", "fe80::1"
  int port = 0;      // 1-65535; 0 when the text had none
  bool has_port() const { return port != 0; }
};

enum class PortRule : unsigned char {
  kRequired,  // "host" alone is an error
  kOptional,  // "host" alone gives port 0
};

// InvalidArgument, naming `text`, for: empty text or host, '[' without ']', text after ']' that is not
// ":PORT", a port that is not a whole number in 1-65535, a missing port under kRequired (with a hint
// to bracket an IPv6 address), and white space or '/' inside the address.
Result<HostPort> ParseHostPort(std::string_view text, PortRule rule = PortRule::kRequired);

// "[v6]" for a host holding ':', the host unchanged otherwise.
std::string FormatHost(std::string_view host);
// "host:port", "[v6]:port"; the host alone (bracketed when IPv6) when port is 0.
std::string FormatHostPort(std::string_view host, int port);
inline std::string FormatHostPort(const HostPort& hp) { return FormatHostPort(hp.host, hp.port); }

}  // namespace commkit
