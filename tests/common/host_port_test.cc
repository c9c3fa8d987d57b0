#include "commkit/common/host_port.h"

#include <gtest/gtest.h>

namespace commkit {
namespace {

HostPort Parsed(std::string_view text, PortRule rule = PortRule::kRequired) {
  auto hp = ParseHostPort(text, rule);
  EXPECT_TRUE(hp.ok()) << text << ": " << hp.status().ToString();
  return hp.ok() ? *hp : HostPort{};
}

std::string ErrorOf(std::string_view text, PortRule rule = PortRule::kRequired) {
  auto hp = ParseHostPort(text, rule);
  EXPECT_FALSE(hp.ok()) << text << " parsed as host '" << (hp.ok() ? hp->host : "") << "' port " << (hp.ok() ? hp->port : 0);
  if (hp.ok()) return "";
  EXPECT_EQ(hp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(hp.status().message().find(std::string(text)), std::string::npos) << "the error names the input";
  return hp.status().message();
}

TEST(HostPort, NamesAndIpv4) {
  HostPort hp = Parsed("10.0.0.4:6105");
  EXPECT_EQ(hp.host, "10.0.0.4");
  EXPECT_EQ(hp.port, 6105);
  EXPECT_TRUE(hp.has_port());
  hp = Parsed("node-1.cluster:1");
  EXPECT_EQ(hp.host, "node-1.cluster");
  EXPECT_EQ(hp.port, 1);
  EXPECT_EQ(Parsed("localhost:65535").port, 65535);
  hp = Parsed("node7", PortRule::kOptional);
  EXPECT_EQ(hp.host, "node7");
  EXPECT_EQ(hp.port, 0);
  EXPECT_FALSE(hp.has_port());
}

TEST(HostPort, Ipv6BracketedAndBare) {
  HostPort hp = Parsed("[fe80::1]:29500");
  EXPECT_EQ(hp.host, "fe80::1");
  EXPECT_EQ(hp.port, 29500);
  hp = Parsed("[::1]", PortRule::kOptional);
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 0);
  hp = Parsed("[fe80::1%eth0]:80");
  EXPECT_EQ(hp.host, "fe80::1%eth0");
  EXPECT_EQ(hp.port, 80);
  // A bare IPv6 literal never carries a port: the last group is part of the address.
  hp = Parsed("fe80::1:29500", PortRule::kOptional);
  EXPECT_EQ(hp.host, "fe80::1:29500");
  EXPECT_EQ(hp.port, 0);
  EXPECT_EQ(Parsed("::", PortRule::kOptional).host, "::");
  EXPECT_EQ(Parsed("::ffff:10.0.0.1", PortRule::kOptional).host, "::ffff:10.0.0.1");
}

TEST(HostPort, MissingPortSaysHowToGiveOne) {
  EXPECT_NE(ErrorOf("node7").find("expected HOST:PORT"), std::string::npos);
  EXPECT_NE(ErrorOf("fe80::1:29500").find("[fe80::1:29500]:PORT"), std::string::npos);
  EXPECT_NE(ErrorOf("[::1]").find("[::1]:PORT"), std::string::npos);
}

TEST(HostPort, MalformedInputIsRejectedWithTheReason) {
  EXPECT_NE(ErrorOf("").find("empty"), std::string::npos);
  EXPECT_NE(ErrorOf(":29500").find("empty host"), std::string::npos);
  EXPECT_NE(ErrorOf("[]:29500").find("empty host"), std::string::npos);
  EXPECT_NE(ErrorOf("[fe80::1:29500").find("'[' without ']'"), std::string::npos);
  EXPECT_NE(ErrorOf("fe80::1]:29500").find("']' without '['"), std::string::npos);
  EXPECT_NE(ErrorOf("[fe80::1]29500").find("after ']'"), std::string::npos);
  EXPECT_NE(ErrorOf("[[::1]]:1").find("nested"), std::string::npos);
  EXPECT_NE(ErrorOf("host:").find("nothing after ':'"), std::string::npos);
  EXPECT_NE(ErrorOf("[::1]:").find("nothing after ':'"), std::string::npos);
  for (const char* bad : {"host:0", "host:65536", "host:99999", "host:-1", "host:+80", "host:80x", "host:0x50",
                          "host:0000080", "host:99999999999999999999"})
    EXPECT_NE(ErrorOf(bad).find("1-65535"), std::string::npos) << bad;
  EXPECT_NE(ErrorOf("host name:80").find("white space"), std::string::npos);
  EXPECT_NE(ErrorOf("host:80/path").find("'/'"), std::string::npos);
  ErrorOf("host:80\n");
}

TEST(HostPort, FormatBracketsIpv6AndRoundTrips) {
  EXPECT_EQ(FormatHostPort("10.0.0.4", 6105), "10.0.0.4:6105");
  EXPECT_EQ(FormatHostPort("fe80::1", 29500), "[fe80::1]:29500");
  EXPECT_EQ(FormatHostPort("fe80::1", 0), "[fe80::1]");
  EXPECT_EQ(FormatHostPort("node7", 0), "node7");
  EXPECT_EQ(FormatHost("::1"), "[::1]");
  EXPECT_EQ(FormatHost("node7"), "node7");
  for (const char* text : {"10.0.0.4:6105", "[fe80::1]:29500", "[::1]:1", "node-1:65535"}) {
    HostPort hp = Parsed(text);
    EXPECT_EQ(FormatHostPort(hp), text);
  }
}

}  // namespace
}  // namespace commkit
