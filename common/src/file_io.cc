#include "commkit/common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "commkit/common/strings.h"

namespace commkit {

namespace fs = std::filesystem;

std::string_view DescribeFileType(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

Result<std::string> ReadRegularFile(const fs::path& path, std::size_t max_bytes, std::string_view what,
                                    Oversize oversize) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever before fstat could
  // tell us what it is.
  int fd = ::open(name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::NotFound(StrCat(what, " ", name, ": no such file"));
    if (err == ELOOP) return Status::InvalidArgument(StrCat(what, " ", name, ": too many levels of symbolic links (a symlink loop)"));
    if (err == EISDIR) return Status::InvalidArgument(StrCat(what, " ", name, " is a directory: pass a file in it"));
    return Status::FromErrno(err, StrCat("cannot open ", what, " ", name));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, StrCat("cannot stat ", what, " ", name));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(StrCat(what, " ", name, " is ", DescribeFileType(st.st_mode),
                                          ", not a regular file: pass a regular file (copy the data into one first)"));
  }
  if (oversize == Oversize::kError && static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return Status::InvalidArgument(StrCat(what, " ", name, " has ", HumanBytes(static_cast<double>(st.st_size)),
                                          ", more than the ", HumanBytes(static_cast<double>(max_bytes)),
                                          " this tool reads: pass an excerpt (e.g. tail -c)"));
  }
  // Regular files can still grow while read, and /proc and /sys report size 0: read to EOF, bounded.
  std::string data;
  std::vector<char> buf(64 * 1024);
  while (true) {
    std::size_t want = buf.size();
    if (data.size() >= max_bytes) {
      if (oversize == Oversize::kTruncate) break;
      want = 1;  // one byte more tells whether it grew past the limit
    }
    ssize_t n = ::read(fd, buf.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, StrCat("error reading ", what, " ", name));
    }
    if (n == 0) break;
    if (data.size() >= max_bytes) {
      return Status::InvalidArgument(StrCat(what, " ", name, " grew past the ", HumanBytes(static_cast<double>(max_bytes)),
                                            " this tool reads while it was being read: pass a finished file"));
    }
    std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(n), max_bytes - data.size());
    data.append(buf.data(), take);
    if (take < static_cast<std::size_t>(n) && oversize == Oversize::kError) {
      return Status::InvalidArgument(StrCat(what, " ", name, " grew past the ", HumanBytes(static_cast<double>(max_bytes)),
                                            " this tool reads while it was being read: pass a finished file"));
    }
  }
  return data;
}

Result<TempDir> TempDir::Create(std::string_view prefix) {
  const char* env = std::getenv("TMPDIR");
  fs::path base = (env != nullptr && *env != '\0') ? fs::path(env) : fs::path("/tmp");
  std::string templ = (base / StrCat(prefix, "-XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return Status::FromErrno(errno, StrCat("cannot create a temporary directory under ", base.string(),
                                           " (set TMPDIR to a writable directory)"));
  }
  return TempDir(fs::path(buf.data()));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);  // best effort: a destructor has no one to report to
  path_.clear();
}

}  // namespace commkit
