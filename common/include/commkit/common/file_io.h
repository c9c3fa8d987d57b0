// Reading files that a user names (logs, topology files, snapshots) without trusting them, and
// temporary directories that are private and always cleaned up.
//
// A path a user passes may be a directory, a FIFO that never delivers EOF, a character device such
// as /dev/zero that never ends, or a file far larger than any log. ReadRegularFile refuses all of
// them up front with an error that says what the path is and what to pass instead, so no tool blocks
// or runs out of memory on its input.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

enum class Oversize {
  kError,     // a file larger than max_bytes is an InvalidArgument error naming both sizes
  kTruncate,  // the first max_bytes are returned (sysfs attributes, log heads)
};

// Reads a regular file (symlinks followed, loops reported) of at most max_bytes. `what` names the
// input in errors, e.g. "log file" or "topology file". Never blocks on FIFOs or devices: they are
// opened non-blocking and refused after fstat.
Result<std::string> ReadRegularFile(const std::filesystem::path& path, std::size_t max_bytes,
                                    std::string_view what, Oversize oversize = Oversize::kError);

// "a directory", "a FIFO (named pipe)", "a character device", ... for an st_mode; "a regular file".
std::string_view DescribeFileType(unsigned mode);

// A directory made with mkdtemp (mode 0700, unpredictable name) under $TMPDIR or /tmp, removed with
// everything in it when the TempDir is destroyed, on every path out of the scope that owns it.
class TempDir {
 public:
  // prefix: e.g. "commkit-topo"; the directory is <tmp>/<prefix>-XXXXXX.
  static Result<TempDir> Create(std::string_view prefix);

  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::filesystem::path& path() const { return path_; }

 private:
  explicit TempDir(std::filesystem::path path) : path_(std::move(path)) {}
  void Remove();
  std::filesystem::path path_;
};

}  // namespace commkit
