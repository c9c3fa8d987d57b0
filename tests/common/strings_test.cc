#include "commkit/common/escape.h"
#include "commkit/common/strings.h"

#include <gtest/gtest.h>

namespace commkit {
namespace {

TEST(Strings, SplitJoinTrim) {
  EXPECT_EQ(Split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(Split("a,b,,c", ',', true), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(Split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(Join({"x", "y", "z"}, ", "), "x, y, z");
  EXPECT_EQ(Trim("  \t v \n"), "v");
  EXPECT_EQ(Trim("   "), "");
  EXPECT_TRUE(StartsWith("mlx5_0", "mlx5"));
  EXPECT_FALSE(StartsWith("ml", "mlx5"));
  EXPECT_TRUE(EndsWith("libnccl.so.2", ".so.2"));
  EXPECT_EQ(ToLower("NV12"), "nv12");
}

TEST(Strings, ParseIntIsStrict) {
  EXPECT_EQ(ParseInt("42"), 42);
  EXPECT_EQ(ParseInt(" -7 "), -7);
  EXPECT_EQ(ParseInt("+3"), 3);
  EXPECT_FALSE(ParseInt("4x"));
  EXPECT_FALSE(ParseInt(""));
  EXPECT_FALSE(ParseInt("99999999999999999999"));
  EXPECT_EQ(ParseDouble("2.5"), 2.5);
  EXPECT_FALSE(ParseDouble("nan"));
  EXPECT_FALSE(ParseDouble("1.0.0"));
}

TEST(Strings, StripTerminalEscapes) {
  // nvidia-smi 580's `topo -m` header, redirected to a file on an H100 VM (tests/data/topology).
  EXPECT_EQ(StripTerminalEscapes("\t\x1b[4mGPU0\tCPU Affinity\x1b[0m\n"), "\tGPU0\tCPU Affinity\n");
  EXPECT_EQ(StripTerminalEscapes("\x1b[1;31mred\x1b[0m plain"), "red plain");
  EXPECT_EQ(StripTerminalEscapes("a\x1b]0;title\ab"), "ab");          // OSC ended by BEL
  EXPECT_EQ(StripTerminalEscapes("a\x1b]8;;http://x\x1b\\b"), "ab");  // OSC ended by ST
  EXPECT_EQ(StripTerminalEscapes("a\x1b(Bb"), "ab");                 // two-byte ESC x
  EXPECT_EQ(StripTerminalEscapes("tail\x1b"), "tail");
  EXPECT_EQ(StripTerminalEscapes("cut\x1b[12"), "cut");
  EXPECT_EQ(StripTerminalEscapes("no escapes\there"), "no escapes\there");
}

TEST(Strings, HumanUnits) {
  EXPECT_EQ(HumanBytes(17), "17 B");
  EXPECT_EQ(HumanBytes(64 << 20), "64 MiB");
  EXPECT_EQ(HumanBytes(1.5 * (1 << 30)), "1.5 GiB");
  EXPECT_EQ(HumanSeconds(30), "30 s");
  EXPECT_EQ(HumanSeconds(0.25), "250 ms");
  EXPECT_EQ(HumanSeconds(12e-6), "12 us");
}

}  // namespace
}  // namespace commkit
