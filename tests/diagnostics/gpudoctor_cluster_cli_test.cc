// gpudoctor cluster through the CLI on loopback: under commkit-run, and with --store where ranks are missing.

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace commkit::testing {
namespace {

std::string Bin(const char* tool) { return std::filesystem::absolute(BinDir() / tool).string(); }

nlohmann::json LastJson(const std::string& output) {
  // commkit-run prefixes each line with "[rank] "; keep rank 0's lines without the prefix.
  std::string text;
  for (const std::string& line : [&] {
         std::vector<std::string> lines;
         std::size_t pos = 0;
         while (pos <= output.size()) {
           std::size_t nl = output.find('\n', pos);
           lines.push_back(output.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
           if (nl == std::string::npos) break;
           pos = nl + 1;
         }
         return lines;
       }()) {
    if (line.rfind("[0] ", 0) == 0) text += line.substr(4) + "\n";
    else if (line.rfind("[", 0) != 0 && line.rfind("commkit-run", 0) != 0) text += line + "\n";
  }
  return nlohmann::json::parse(text, nullptr, false);
}

TEST(GpudoctorClusterCli, UnderCommkitRunEveryPairConnects) {
  CommandResult r = RunCommand("timeout 60 " + Bin("commkit-run") + " -n 3 --master-port 0 -- " + Bin("gpudoctor") +
                               " cluster --listen 127.0.0.1 --timeout 20 --only shm --json --bandwidth-bytes 100000 2>&1");
  auto report = LastJson(r.output);
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_EQ(report["hosts"].size(), 3u) << r.output;
  EXPECT_EQ(report["links"].size(), 6u) << r.output;
  for (const auto& l : report["links"]) EXPECT_TRUE(l["ok"].get<bool>()) << l.dump();
}

TEST(GpudoctorClusterCli, MissingRanksAreNamedWithinTheTimeout) {
  CommandResult r = RunCommand("timeout 60 " + Bin("gpudoctor") +
                               " cluster --store 127.0.0.1:0 --rank 0 --world 3 --host-store --timeout 1 2>&1");
  // Port 0 is not a usable store address: a usage error, said so.
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const int free_port = FreeLoopbackPort();
  ASSERT_GT(free_port, 0);
  const std::string port = std::to_string(free_port);
  r = RunCommand("timeout 60 " + Bin("gpudoctor") + " cluster --store 127.0.0.1:" + port + " --rank 0 --world 3 --host-store --listen 127.0.0.1 --timeout 1"
                 " --only shm --json 2>/dev/null");
  auto report = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_EQ(report["exit_code"], 2);
  EXPECT_NE(report["findings"][0]["summary"].get<std::string>().find("ranks [1, 2] of 3 never reported"),
            std::string::npos)
      << report["findings"].dump(2);
}

}  // namespace
}  // namespace commkit::testing
