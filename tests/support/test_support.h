// Helpers shared by commkit's tests.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "commkit/common/status.h"

namespace commkit::testing {

// ../shared/fixtures (COMMKIT_FIXTURES_DIR), or nullopt when absent: corpus tests GTEST_SKIP then.
std::optional<std::filesystem::path> FixturesDir();
// tests/data in the source tree.
std::filesystem::path TestDataDir();
// The directory holding the built tools (commkit-run, gpudoctor, ...).
std::filesystem::path BinDir();

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Writes `contents` to path()/relative, creating parent directories.
  std::filesystem::path Write(const std::string& relative, const std::string& contents) const;

 private:
  std::filesystem::path path_;
};

// Runs a shell command, returning its exit status (or -1) and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

// A loopback TCP port the kernel just reported free (bound to port 0, then closed), for a tool that must
// be given a fixed port: unlike a port derived from the pid, it is not one another test already holds.
int FreeLoopbackPort();

// Sets an environment variable for the lifetime of the guard and restores it afterwards; also resets
// commkit's environment cache both times.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace commkit::testing

#define COMMKIT_ASSERT_OK(expr)                                        \
  do {                                                                 \
    const ::commkit::Status commkit_assert_status_ = (expr);           \
    ASSERT_TRUE(commkit_assert_status_.ok()) << commkit_assert_status_.ToString(); \
  } while (false)
#define COMMKIT_EXPECT_OK(expr)                                        \
  do {                                                                 \
    const ::commkit::Status commkit_expect_status_ = (expr);           \
    EXPECT_TRUE(commkit_expect_status_.ok()) << commkit_expect_status_.ToString(); \
  } while (false)
