#include "commkit/common/system_view.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <utility>

#include "commkit/common/fact_schema.h"
#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxSymlinkHops = 40;
constexpr std::string_view kFactsDir = ".commkit/facts";
constexpr std::size_t kMaxFactBytes = 64u << 20;

bool ValidFactName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// Splits "/a/b/../c" into components, normalising ".." lexically (used only on resolved paths).
std::vector<std::string> Components(std::string_view path) {
  std::vector<std::string> out;
  for (auto& part : Split(path, '/', /*skip_empty=*/true)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(part);
  }
  return out;
}

// Splits without touching "..": the walk applies it after resolving the symlinks before it, as the
// kernel does ("/sys/class/net/eth0/../.." climbs from the link's target, not from /sys/class/net).
std::vector<std::string> RawComponents(std::string_view path) {
  std::vector<std::string> out;
  for (auto& part : Split(path, '/', /*skip_empty=*/true))
    if (part != ".") out.push_back(part);
  return out;
}

std::string JoinMachine(const std::vector<std::string>& parts, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

// Regular files only (ReadRegularFile): a FIFO, device or symlink loop planted in a capture is
// refused instead of blocking or never ending. sysfs/proc files are regular and stat as size 0 or
// 4096, so they are read to EOF and cut at max_bytes.
Result<std::string> ReadWhole(const fs::path& host_path, std::size_t max_bytes, std::string_view machine_path) {
  auto data = ReadRegularFile(host_path, max_bytes, machine_path, Oversize::kTruncate);
  if (!data.ok() && data.status().code() == StatusCode::kNotFound) return Status::NotFound(StrCat(machine_path, ": no such file"));
  return data;
}

}  // namespace

struct SystemView::Capture {
  std::mutex mu;
  fs::path dir;
  std::set<std::string> recorded;
};

struct SystemView::Unreadable {
  std::mutex mu;
  std::vector<std::string> facts;
};

std::shared_ptr<SystemView> SystemView::Live() { return std::make_shared<SystemView>("/", true); }

std::shared_ptr<SystemView> SystemView::Replay(fs::path root) {
  return std::make_shared<SystemView>(std::move(root), false);
}

SystemView::SystemView(fs::path root, bool live)
    : root_(std::move(root)), live_(live), unreadable_(std::make_unique<Unreadable>()) {}
SystemView::~SystemView() = default;

Status SystemView::StartCapture(const fs::path& dir) {
  if (!live_) return Status::InvalidArgument("capture works on a live view only, not on a replay of " + root_.string());
  std::error_code ec;
  fs::create_directories(dir / kFactsDir, ec);
  if (ec) return Status::SystemError(StrCat("cannot create capture directory ", dir.string(), ": ", ec.message()));
  auto capture = std::make_unique<Capture>();
  capture->dir = dir;
  capture_ = std::move(capture);
  return Status::Ok();
}

void SystemView::StopCapture() { capture_.reset(); }

Result<fs::path> SystemView::Resolve(std::string_view machine_path, bool follow_last) const {
  std::vector<std::string> pending = RawComponents(machine_path);
  std::reverse(pending.begin(), pending.end());  // stack: back() is next component
  std::vector<std::string> done;
  int hops = 0;
  while (!pending.empty()) {
    std::string part = std::move(pending.back());
    pending.pop_back();
    if (part == "..") {
      if (!done.empty()) done.pop_back();  // never above the root
      continue;
    }
    done.push_back(part);
    bool is_last = pending.empty();
    if (is_last && !follow_last) break;
    fs::path host = root_;
    for (auto& d : done) host /= d;
    struct stat st {};
    if (::lstat(host.c_str(), &st) != 0) {
      // Missing components: the caller's open reports NotFound with the full path.
      for (auto it = pending.rbegin(); it != pending.rend(); ++it) done.push_back(*it);
      break;
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++hops > kMaxSymlinkHops) return Status::SystemError(StrCat(machine_path, ": too many levels of symbolic links"));
    char buf[4096];
    ssize_t n = ::readlink(host.c_str(), buf, sizeof(buf) - 1);
    if (n < 0) return Status::FromErrno(errno, StrCat("readlink ", JoinMachine(done, done.size())));
    std::string target(buf, static_cast<std::size_t>(n));
    done.pop_back();
    if (!target.empty() && target[0] == '/') done.clear();
    auto target_parts = RawComponents(target);
    for (auto it = target_parts.rbegin(); it != target_parts.rend(); ++it) pending.push_back(*it);
  }
  // Collapse any ".." that came in through link targets.
  std::string joined = JoinMachine(done, done.size());
  fs::path out = root_;
  for (auto& p : Components(joined)) out /= p;
  return out;
}

Result<std::string> SystemView::RealPath(std::string_view path) const {
  COMMKIT_ASSIGN_OR_RETURN(fs::path host, Resolve(path, true));
  std::string rel = host.lexically_relative(root_).generic_string();
  if (rel == ".") rel.clear();
  return "/" + rel;
}

Result<std::string> SystemView::ReadFile(std::string_view path, std::size_t max_bytes) const {
  COMMKIT_ASSIGN_OR_RETURN(fs::path host, Resolve(path, true));
  auto data = ReadWhole(host, max_bytes, path);
  if (data.ok()) Record(path);
  return data;
}

Result<std::string> SystemView::ReadAttr(std::string_view path) const {
  COMMKIT_ASSIGN_OR_RETURN(std::string data, ReadFile(path, 64 << 10));
  return std::string(Trim(data));
}

Result<std::vector<std::string>> SystemView::ListDir(std::string_view path) const {
  COMMKIT_ASSIGN_OR_RETURN(fs::path host, Resolve(path, true));
  std::error_code ec;
  fs::directory_iterator it(host, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory)
      return Status::NotFound(StrCat(path, ": no such directory"));
    return Status::SystemError(StrCat("cannot list ", path, ": ", ec.message()));
  }
  std::vector<std::string> names;
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (path == "/" && name == ".commkit") continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  Record(path);
  if (capture_) {
    for (const auto& name : names) Record(StrCat(path, "/", name) + "\x01");  // entry only
  }
  return names;
}

Result<std::string> SystemView::ReadLink(std::string_view path) const {
  COMMKIT_ASSIGN_OR_RETURN(fs::path host, Resolve(path, false));
  char buf[4096];
  ssize_t n = ::readlink(host.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::NotFound(StrCat(path, ": no such link"));
    return Status::FromErrno(err, StrCat("readlink ", path));
  }
  Record(path);
  return std::string(buf, static_cast<std::size_t>(n));
}

bool SystemView::Exists(std::string_view path) const {
  auto host = Resolve(path, true);
  if (!host.ok()) return false;
  std::error_code ec;
  bool exists = fs::exists(*host, ec);
  if (exists) Record(std::string(path) + "\x01");
  return exists;
}

bool SystemView::IsDirectory(std::string_view path) const {
  auto host = Resolve(path, true);
  if (!host.ok()) return false;
  std::error_code ec;
  bool dir = fs::is_directory(*host, ec);
  if (dir) Record(std::string(path) + "\x01");
  return dir;
}

Result<std::string> SystemView::Fact(std::string_view name, const std::function<Result<std::string>()>& produce) const {
  COMMKIT_CHECK(ValidFactName(name), "invalid fact name '", name, "'");
  if (!live_) {
    fs::path file = root_ / kFactsDir / std::string(name);
    auto data = ReadRegularFile(file, kMaxFactBytes, StrCat("snapshot fact '", name, "'"));
    if (!data.ok() && data.status().code() == StatusCode::kNotFound)
      return Status::NotFound(StrCat("fact '", name, "' is not in the capture at ", root_.string()));
    Status bad = data.ok() ? ValidateFact(name, *data) : data.status();
    if (!bad.ok()) {
      std::string what = data.ok() ? StrCat("snapshot fact '", name, "' (", file.string(), ") is corrupt: ", bad.message(),
                                            "; the snapshot was damaged or edited: take a new one")
                                   : bad.message();
      std::lock_guard<std::mutex> lock(unreadable_->mu);
      unreadable_->facts.push_back(what);
      return Status::DataLoss(std::move(what));
    }
    return data;
  }
  auto value = produce();
  if (value.ok()) RecordFact(name, *value);
  return value;
}

std::vector<std::string> SystemView::TakeUnreadableFacts() const {
  std::lock_guard<std::mutex> lock(unreadable_->mu);
  return std::exchange(unreadable_->facts, {});
}

// Copies `machine_path` (and every symlink on the way to it) into the capture directory. A trailing
// "\x01" records only the entry itself (directory created, symlink kept, regular file left empty)
// so that listings and existence checks replay without copying every file's contents.
void SystemView::Record(std::string_view request) const {
  if (!capture_) return;
  bool entry_only = !request.empty() && request.back() == '\x01';
  std::string_view machine_path = entry_only ? request.substr(0, request.size() - 1) : request;
  std::lock_guard<std::mutex> lock(capture_->mu);
  std::string key = std::string(machine_path) + (entry_only ? "?" : "");
  if (capture_->recorded.count(key) || capture_->recorded.count(std::string(machine_path))) return;
  capture_->recorded.insert(key);

  std::vector<std::string> pending = RawComponents(machine_path);
  std::reverse(pending.begin(), pending.end());
  std::vector<std::string> done;
  int hops = 0;
  std::error_code ec;
  while (!pending.empty() && hops <= kMaxSymlinkHops) {
    if (pending.back() == "..") {
      if (!done.empty()) done.pop_back();
      pending.pop_back();
      continue;
    }
    done.push_back(pending.back());
    pending.pop_back();
    fs::path live_path = root_;
    fs::path cap_path = capture_->dir;
    for (auto& d : done) {
      live_path /= d;
      cap_path /= d;
    }
    struct stat st {};
    if (::lstat(live_path.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlink(live_path.c_str(), buf, sizeof(buf) - 1);
      if (n < 0) return;
      std::string target(buf, static_cast<std::size_t>(n));
      fs::create_directories(cap_path.parent_path(), ec);
      if (!fs::is_symlink(fs::symlink_status(cap_path, ec))) fs::create_symlink(target, cap_path, ec);
      if (entry_only && pending.empty()) return;
      ++hops;
      done.pop_back();
      if (!target.empty() && target[0] == '/') done.clear();
      auto parts = RawComponents(target);
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) pending.push_back(*it);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      fs::create_directories(cap_path, ec);
      continue;
    }
    if (!pending.empty()) return;  // a file in the middle of a path: nothing more to record
    fs::create_directories(cap_path.parent_path(), ec);
    if (entry_only) {
      if (!fs::exists(fs::symlink_status(cap_path, ec))) std::ofstream(cap_path, std::ios::binary);
      return;
    }
    auto data = ReadWhole(live_path, 4 << 20, machine_path);
    if (!data.ok()) return;
    std::ofstream out(cap_path, std::ios::binary | std::ios::trunc);
    out.write(data->data(), static_cast<std::streamsize>(data->size()));
  }
}

void SystemView::RecordFact(std::string_view name, const std::string& value) const {
  if (!capture_) return;
  std::lock_guard<std::mutex> lock(capture_->mu);
  std::ofstream out(capture_->dir / kFactsDir / std::string(name), std::ios::binary | std::ios::trunc);
  out.write(value.data(), static_cast<std::streamsize>(value.size()));
}

}  // namespace commkit
