// commkit-store serve + client subcommands.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "commkit/common/config.h"
#include "test_support.h"

namespace commkit::testing {
namespace {

// Every tool answers --version with the package version and exit 0; commkit-run's own flags end at the
// program name, so a program's --version is the program's.
TEST(ToolsCli, VersionFlag) {
  for (const char* tool : {"commkit-store", "commkit-run", "commkit-topo", "gpudoctor", "commkit-bench"}) {
    auto r = RunCommand((BinDir() / tool).string() + " --version");
    EXPECT_EQ(r.exit_code, 0) << tool << ": " << r.output;
    EXPECT_EQ(r.output, std::string(COMMKIT_VERSION_STRING) + "\n") << tool;
  }
  auto passed = RunCommand((BinDir() / "commkit-run").string() + " -n 1 -- /bin/sh -c 'echo \"arg:$1\"' sh --version 2>&1");
  EXPECT_EQ(passed.exit_code, 0) << passed.output;
  EXPECT_NE(passed.output.find("[0] arg:--version"), std::string::npos) << passed.output;
}

TEST(CommkitStoreCli, ServeAndClientRoundTrip) {
  TempDir dir;
  std::string bin = (BinDir() / "commkit-store").string();
  std::string log = (dir.path() / "serve.json").string();
  // Start a server on a free port; it prints its address as JSON.
  auto started = RunCommand("(" + bin + " --json serve --host 127.0.0.1 --port 0 --token tok > " + log +
                            " 2>&1 & echo $!)");
  ASSERT_EQ(started.exit_code, 0);
  std::string pid = started.output.substr(0, started.output.find('\n'));
  std::string port;
  for (int i = 0; i < 100 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(log);
    std::string line;
    if (std::getline(in, line)) {
      auto p = line.find("\"port\":");
      if (p != std::string::npos) port = line.substr(p + 7, line.find_first_of(",}", p) - p - 7);
    }
  }
  ASSERT_FALSE(port.empty()) << "server did not report its port";
  std::string addr = " --addr 127.0.0.1:" + port + " --token tok --timeout 2";
  EXPECT_EQ(RunCommand(bin + " set" + addr + " greeting hello").exit_code, 0);
  auto get = RunCommand(bin + " get" + addr + " greeting");
  EXPECT_EQ(get.exit_code, 0);
  EXPECT_EQ(get.output, "hello\n");
  EXPECT_EQ(RunCommand(bin + " add" + addr + " n 5").output, "5\n");
  EXPECT_EQ(RunCommand(bin + " --json add" + addr + " n 2").output, "{\"value\":7}\n");
  EXPECT_EQ(RunCommand(bin + " check" + addr + " greeting n").exit_code, 0);
  EXPECT_EQ(RunCommand(bin + " check" + addr + " greeting absent").exit_code, 3);
  auto missing = RunCommand(bin + " get --addr 127.0.0.1:" + port + " --token tok --timeout 0.2 absent");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.output.find("keys still missing: [absent]"), std::string::npos) << missing.output;
  auto wrong = RunCommand(bin + " get --addr 127.0.0.1:" + port + " --token nope --timeout 1 greeting");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.output.find("wrong job token"), std::string::npos) << wrong.output;
  EXPECT_EQ(RunCommand(bin + " num-keys" + addr).output, "2\n");
  EXPECT_EQ(RunCommand(bin + " delete" + addr + " n").exit_code, 0);
  EXPECT_EQ(RunCommand(bin + " delete" + addr + " n").exit_code, 3);
  EXPECT_EQ(RunCommand(bin + " get --addr nocolon greeting").exit_code, 2);
  RunCommand("kill -TERM " + pid + "; sleep 0.3");
  std::ifstream in(log);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("stopping;"), std::string::npos) << all;
}

}  // namespace
}  // namespace commkit::testing
