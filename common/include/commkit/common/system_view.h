// SystemView: a read-only view of a machine's files under a root directory, plus "facts" (answers
// from libraries or commands that are not files), with optional capture.
//
// Probers and health checks read the machine only through a SystemView, never through a hard-coded
// "/sys" or "/proc" (hwloc's HWLOC_FSROOT idea). Live: root "/" and facts computed by their producer.
// Replay: root is a captured directory and facts come from <root>/.commkit/facts/<name>. Capture:
// while a live view captures into a directory, every file, directory listing, symlink and fact it
// reads is copied there, so the capture replays exactly what the probes saw.
//
// Paths passed in are absolute machine paths ("/sys/class/net/eth0/mtu"); symlinks inside the root
// (sysfs is full of relative ones) are resolved within the root, and absolute link targets are
// re-rooted. Thread-safe.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

class SystemView {
 public:
  // A live view of this machine ("/").
  static std::shared_ptr<SystemView> Live();
  // A view of a captured tree (a capture directory, or a copy of /sys and /proc laid out under root).
  static std::shared_ptr<SystemView> Replay(std::filesystem::path root);

  SystemView(std::filesystem::path root, bool live);
  ~SystemView();
  SystemView(const SystemView&) = delete;
  SystemView& operator=(const SystemView&) = delete;

  const std::filesystem::path& root() const { return root_; }
  bool live() const { return live_; }

  // Starts copying everything read from now on into `dir` (created if needed). Live views only.
  Status StartCapture(const std::filesystem::path& dir);
  void StopCapture();

  // Contents of a regular file (sysfs/proc files stat as size 0 or 4096: read to EOF, at most
  // max_bytes). NotFound when absent; InvalidArgument for a FIFO, device or directory (never read,
  // so a capture cannot make a tool block); SystemError on other failures.
  Result<std::string> ReadFile(std::string_view path, std::size_t max_bytes = 4 << 20) const;
  // The same with surrounding whitespace removed (one-value sysfs attributes).
  Result<std::string> ReadAttr(std::string_view path) const;
  // Entry names of a directory, sorted; NotFound when absent.
  Result<std::vector<std::string>> ListDir(std::string_view path) const;
  // Target of a symlink as stored ("../../../devices/pci0000:00/0000:00:01.0").
  Result<std::string> ReadLink(std::string_view path) const;
  // The absolute machine path after resolving every symlink inside the root.
  Result<std::string> RealPath(std::string_view path) const;
  bool Exists(std::string_view path) const;
  bool IsDirectory(std::string_view path) const;

  // A named fact (NVML answers, getifaddrs, a command's output...), serialised as text by its
  // producer. Live: runs `produce` (and records the answer when capturing). Replay: reads the
  // recorded answer; NotFound "fact 'x' is not in the capture at <root>" when it was never recorded.
  // Names are [A-Za-z0-9._-]+.
  // A replayed fact is checked against its schema (fact_schema.h): a corrupt one is DataLoss and
  // is also remembered, so whoever reports results can mark them unreadable (TakeUnreadableFacts).
  Result<std::string> Fact(std::string_view name, const std::function<Result<std::string>()>& produce) const;
  // Messages for the facts found corrupt or unreadable since the last call; clears the list.
  std::vector<std::string> TakeUnreadableFacts() const;

 private:
  Result<std::filesystem::path> Resolve(std::string_view machine_path, bool follow_last) const;
  void Record(std::string_view machine_path) const;
  void RecordFact(std::string_view name, const std::string& value) const;

  std::filesystem::path root_;
  bool live_;
  struct Capture;
  std::unique_ptr<Capture> capture_;
  struct Unreadable;
  std::unique_ptr<Unreadable> unreadable_;
};

}  // namespace commkit
