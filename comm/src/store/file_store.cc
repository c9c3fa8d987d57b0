#include "commkit/comm/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "commkit/common/strings.h"
#include "poll_wait.h"

namespace commkit {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kKeyPrefix[] = "k-";
constexpr char kTempPrefix[] = ".tmp-";

std::uint64_t Hash(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h ^ (h >> 29);
}

// fcntl locks belong to the process, so threads of one process also take this mutex.
std::mutex& ProcessLock() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// Exclusive lock on <dir>/.lock for read-modify-write operations: a process-wide mutex (threads) plus
// an fcntl lock (processes, and hosts on NFS through lockd).
class DirLock {
 public:
  // Bounded: a holder that hangs (a stopped process, a stuck NFS client) must not hang every rank, so
  // the lock is polled with F_SETLK (backoff 1 ms .. 50 ms) for at most `timeout`.
  static Result<DirLock> Acquire(const fs::path& dir, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> guard(ProcessLock(), std::defer_lock);
    fs::path path = dir / ".lock";
    auto pause = std::chrono::milliseconds(1);
    auto timed_out = [&] {
      return Status::Timeout(StrCat("file store ", dir.string(), ": could not lock ", path.string(), " within ",
                                    HumanSeconds(static_cast<double>(timeout.count()) / 1000.0),
                                    "; another process holds it (a hung or stopped rank, or an NFS lockd problem)"));
    };
    while (!guard.try_lock()) {
      if (Clock::now() >= deadline) return timed_out();
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno(errno, StrCat("file store: open ", path.string()));
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    pause = std::chrono::milliseconds(1);
    while (::fcntl(fd, F_SETLK, &fl) != 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err != EACCES && err != EAGAIN) {
        ::close(fd);
        return Status::FromErrno(err, StrCat("file store: lock ", path.string()));
      }
      if (Clock::now() >= deadline) {
        ::close(fd);
        return timed_out();
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    return DirLock(fd, std::move(guard));
  }
  DirLock(DirLock&& o) noexcept : fd_(o.fd_), guard_(std::move(o.guard_)) { o.fd_ = -1; }
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the fcntl lock
  }

 private:
  DirLock(int fd, std::unique_lock<std::mutex> guard) : fd_(fd), guard_(std::move(guard)) {}
  int fd_;
  std::unique_lock<std::mutex> guard_;
};

}  // namespace

Result<std::unique_ptr<FileStore>> FileStore::Open(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    return Status::Unavailable(StrCat("file store: cannot use directory ", dir.string(), ": ",
                                      ec ? ec.message() : std::string("not a directory"),
                                      ". Every rank must see the same path (a shared filesystem for multi-host jobs)"));
  if (::access(dir.c_str(), W_OK) != 0)
    return Status::PermissionDenied(StrCat("file store: directory ", dir.string(), " is not writable"));
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

std::string FileStore::Describe() const { return StrCat("file store ", dir_.string()); }

fs::path FileStore::PathFor(std::string_view key) const {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%016llx%016llx", kKeyPrefix, static_cast<unsigned long long>(Hash(key, 0)),
                static_cast<unsigned long long>(Hash(key, 0x9e3779b97f4a7c15ull)));
  return dir_ / name;
}

Result<std::optional<std::string>> FileStore::Read(std::string_view key) const {
  fs::path path = PathFor(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Status::FromErrno(errno, StrCat(Describe(), ": read ", path.string()));
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 4) return Status::DataLoss(StrCat(Describe(), ": ", path.string(), " is truncated"));
  std::uint32_t key_len;
  std::memcpy(&key_len, data.data(), 4);
  if (data.size() < 4 + static_cast<std::size_t>(key_len))
    return Status::DataLoss(StrCat(Describe(), ": ", path.string(), " is truncated"));
  if (std::string_view(data).substr(4, key_len) != key)
    return Status::DataLoss(StrCat(Describe(), ": ", path.string(), " holds another key (hash collision or corruption)"));
  return std::optional<std::string>(data.substr(4 + key_len));
}

Status FileStore::Write(std::string_view key, std::string_view value) const {
  static std::atomic<std::uint64_t> counter{0};
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "%d-%llu", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  fs::path tmp = dir_ / (std::string(kTempPrefix) + suffix);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::FromErrno(errno, StrCat(Describe(), ": create ", tmp.string()));
    auto key_len = static_cast<std::uint32_t>(key.size());
    out.write(reinterpret_cast<const char*>(&key_len), 4);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.close();  // NFS reports write errors at close: check it before renaming into place
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return Status::SystemError(StrCat(Describe(), ": write ", tmp.string(), " failed (disk full?)"));
    }
  }
  std::error_code ec;
  fs::rename(tmp, PathFor(key), ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::SystemError(StrCat(Describe(), ": rename into place failed: ", ec.message()));
  }
  return Status::Ok();
}

Status FileStore::Set(std::string_view key, std::string_view value) { return Write(key, value); }

std::vector<std::string> FileStore::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    std::error_code ec;
    if (!fs::exists(PathFor(k), ec)) missing.push_back(k);
  }
  return missing;
}

Status FileStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return PollForKeys(Describe(), keys, timeout,
                     [this](const std::vector<std::string>& pending) -> Result<std::vector<std::string>> {
                       return Missing(pending);
                     });
}

Result<std::string> FileStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys{std::string(key)};
  COMMKIT_ASSIGN_OR_RETURN(auto values, MultiGet(keys, timeout));
  return std::move(values[0]);
}

Result<std::vector<std::string>> FileStore::MultiGet(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  COMMKIT_RETURN_IF_ERROR(Wait(keys, timeout));
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) {
    COMMKIT_ASSIGN_OR_RETURN(auto v, Read(k));
    if (!v) return Status::NotFound(StrCat(Describe(), ": key '", k, "' was deleted while reading"));
    values.push_back(std::move(*v));
  }
  return values;
}

Result<std::int64_t> FileStore::Add(std::string_view key, std::int64_t delta) {
  COMMKIT_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir_, timeout()));
  COMMKIT_ASSIGN_OR_RETURN(auto current, Read(key));
  std::int64_t value = 0;
  if (current) {
    auto parsed = ParseInt(*current);
    if (!parsed) return Status::InvalidArgument(StrCat(Describe(), ": add on key '", key, "' whose value is not an integer"));
    value = *parsed;
  }
  if (__builtin_add_overflow(value, delta, &value))
    return Status::InvalidArgument(StrCat(Describe(), ": add of ", delta, " to key '", key, "' overflows a 64-bit integer"));
  COMMKIT_RETURN_IF_ERROR(Write(key, std::to_string(value)));
  return value;
}

Result<std::string> FileStore::CompareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  COMMKIT_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir_, timeout()));
  COMMKIT_ASSIGN_OR_RETURN(auto current, Read(key));
  if (!current) {
    if (!expected.empty()) return std::string();
  } else if (*current != expected) {
    return std::move(*current);
  }
  COMMKIT_RETURN_IF_ERROR(Write(key, desired));
  return std::string(desired);
}

Result<bool> FileStore::Check(const std::vector<std::string>& keys) { return Missing(keys).empty(); }

Result<bool> FileStore::Delete(std::string_view key) {
  std::error_code ec;
  bool removed = fs::remove(PathFor(key), ec);
  if (ec) return Status::SystemError(StrCat(Describe(), ": delete: ", ec.message()));
  return removed;
}

Result<std::int64_t> FileStore::NumKeys() {
  std::int64_t n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec))
    if (StartsWith(entry.path().filename().string(), kKeyPrefix)) ++n;
  if (ec) return Status::SystemError(StrCat(Describe(), ": list: ", ec.message()));
  return n;
}

Status FileStore::MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    return Status::InvalidArgument(StrCat(Describe(), ": multi_set with ", keys.size(), " keys but ", values.size(), " values"));
  for (std::size_t i = 0; i < keys.size(); ++i) COMMKIT_RETURN_IF_ERROR(Write(keys[i], values[i]));
  return Status::Ok();
}

}  // namespace commkit
