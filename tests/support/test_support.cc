#include "test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "commkit/common/env.h"

namespace commkit::testing {

namespace fs = std::filesystem;

std::optional<fs::path> FixturesDir() {
  const char* dir = std::getenv("COMMKIT_FIXTURES_DIR");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  return fs::path(dir);
}

fs::path TestDataDir() {
  const char* dir = std::getenv("COMMKIT_TEST_DATA_DIR");
  return dir ? fs::path(dir) : fs::path("tests/data");
}

fs::path BinDir() {
  const char* dir = std::getenv("COMMKIT_BIN_DIR");
  return dir ? fs::path(dir) : fs::path("bin");
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "commkit-test-XXXXXX").string();
  char* made = ::mkdtemp(pattern.data());
  if (made == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    path_ = fs::temp_directory_path();
    return;
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (path_ != fs::temp_directory_path()) fs::remove_all(path_, ec);
}

fs::path TempDir::Write(const std::string& relative, const std::string& contents) const {
  fs::path file = path_ / relative;
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << contents;
  return file;
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  std::string full = command + " 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  int status = ::pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

ScopedEnv::ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str())) old_ = old;
  if (value) ::setenv(name_.c_str(), value->c_str(), 1);
  else ::unsetenv(name_.c_str());
  ResetEnvCacheForTesting();
}

ScopedEnv::~ScopedEnv() {
  if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
  else ::unsetenv(name_.c_str());
  ResetEnvCacheForTesting();
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace commkit::testing
