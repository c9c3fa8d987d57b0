#include "commkit/common/host_port.h"

#include <algorithm>

#include "commkit/common/strings.h"

namespace commkit {
namespace {

Status Bad(std::string_view text, std::string_view why) {
  return Status::InvalidArgument(StrCat("address '", text, "': ", why));
}

Result<int> ParsePort(std::string_view text, std::string_view port) {
  if (port.empty()) return Bad(text, "nothing after ':' (expected a port in 1-65535)");
  // Digits only: ParseInt would take a sign, and "+80" or "-0" are not ports.
  const bool digits = std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  auto value = digits && port.size() <= 5 ? ParseInt(port) : std::nullopt;
  if (!value || *value < 1 || *value > 65535) return Bad(text, StrCat("port '", port, "' is not a number in 1-65535"));
  return static_cast<int>(*value);
}

}  // namespace

Result<HostPort> ParseHostPort(std::string_view text, PortRule rule) {
  if (text.empty()) return Bad(text, "empty (expected HOST, HOST:PORT or [IPV6]:PORT)");
  if (std::any_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '/'; }))
    return Bad(text, "white space or '/' in an address (expected HOST:PORT or [IPV6]:PORT)");
  HostPort out;
  std::string_view port;
  bool has_port = false;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return Bad(text, "'[' without ']' (expected [IPV6]:PORT)");
    out.host = std::string(text.substr(1, close - 1));
    if (out.host.empty()) return Bad(text, "empty host inside '[]'");
    if (out.host.find_first_of("[]") != std::string::npos) return Bad(text, "nested '[' or ']'");
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Bad(text, StrCat("unexpected '", rest, "' after ']' (expected :PORT)"));
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    if (text.find(']') != std::string_view::npos) return Bad(text, "']' without '['");
    const auto first = text.find(':');
    if (first != std::string_view::npos && text.find(':', first + 1) == std::string_view::npos) {
      out.host = std::string(text.substr(0, first));
      port = text.substr(first + 1);
      has_port = true;
      if (out.host.empty()) return Bad(text, "empty host before ':'");
    } else {
      out.host = std::string(text);  // a name, an IPv4 address, or a bare IPv6 literal (two or more ':')
    }
  }
  if (has_port) {
    COMMKIT_ASSIGN_OR_RETURN(out.port, ParsePort(text, port));
  } else if (rule == PortRule::kRequired) {
    return Bad(text, out.host.find(':') != std::string::npos
                         ? StrCat("no port (an IPv6 address takes one in brackets: [", out.host, "]:PORT)")
                         : std::string("no port (expected HOST:PORT)"));
  }
  return out;
}

std::string FormatHost(std::string_view host) {
  return host.find(':') != std::string_view::npos ? StrCat("[", host, "]") : std::string(host);
}

std::string FormatHostPort(std::string_view host, int port) {
  return port == 0 ? FormatHost(host) : StrCat(FormatHost(host), ":", port);
}

}  // namespace commkit
