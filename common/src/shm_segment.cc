#include "commkit/common/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "commkit/common/strings.h"

namespace commkit::shm {

namespace {

std::string ShmFullHint(std::size_t bytes, std::string_view shrink) {
  std::string free_text = "unknown";
  if (auto free = ShmFreeBytes(); free.ok()) free_text = HumanBytes(static_cast<double>(*free));
  return StrCat("could not reserve ", HumanBytes(static_cast<double>(bytes)), " in /dev/shm (", free_text,
                " free). Enlarge /dev/shm (docker run --shm-size=8g; Kubernetes: an emptyDir with medium: Memory "
                "on /dev/shm; or mount -o remount,size=8G /dev/shm)", shrink.empty() ? "" : ", or ", shrink);
}

std::string ReadLink(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (owner_) Unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)),
      owner_(std::exchange(other.owner_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (owner_) Unlink();
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

// MAP_POPULATE: the page tables are filled here, at group creation, not by minor faults on the first
// calls (a fresh 2-rank group took 15-25 us per 64 KiB all-gather for its first few dozen calls, against
// 4.7 us after, because each touch of a new slot page faulted in both processes).
constexpr int kMapFlags = MAP_SHARED | MAP_POPULATE;

Result<ShmSegment> ShmSegment::Create(const std::string& name, std::size_t bytes, std::string_view shrink) {
  // Fail before touching memory when it cannot fit (posix_fallocate would fill /dev/shm first).
  if (auto free = ShmFreeBytes(); free.ok() && *free < bytes) return Status::Unavailable(ShmFullHint(bytes, shrink));
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status::FromErrno(errno, StrCat("shm_open(", name, ", O_CREAT|O_EXCL)"));
  ShmSegment seg;
  seg.name_ = name;
  seg.owner_ = true;  // from here on, failures remove the name
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, StrCat("ftruncate(", name, ", ", bytes, ")")).WithContext(ShmFullHint(bytes, shrink));
  }
  // ftruncate only sets the size: without reserving the pages a full /dev/shm kills the process with
  // SIGBUS on first touch. posix_fallocate turns that into ENOSPC now.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    ::close(fd);
    if (err == ENOSPC || err == EFBIG) return Status::Unavailable(ShmFullHint(bytes, shrink));
    return Status::FromErrno(err, StrCat("posix_fallocate(", name, ")"));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, kMapFlags, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::FromErrno(err, StrCat("mmap(", name, ")"));
  seg.data_ = static_cast<std::uint8_t*>(p);
  seg.size_ = bytes;
  return seg;
}

Result<ShmSegment> ShmSegment::Open(const std::string& name, std::size_t bytes, std::string_view why_size) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0)
    return Status::FromErrno(errno, StrCat("shm_open(", name, ") of a peer's segment (do all ranks share /dev/shm? "
                                           "containers need the same IPC namespace and /dev/shm mount)"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(fd);
    return Status::Mismatch(StrCat("shared-memory segment ", name, " has ", st.st_size, " bytes, expected ", bytes,
                                   " (ranks run different commkit versions", why_size.empty() ? "" : " or ", why_size,
                                   why_size.empty() ? "" : " values", "?)"));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, kMapFlags, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::FromErrno(err, StrCat("mmap(", name, ")"));
  ShmSegment seg;
  seg.data_ = static_cast<std::uint8_t*>(p);
  seg.size_ = bytes;
  seg.name_ = name;
  return seg;
}

void ShmSegment::Unlink() {
  if (!owner_ || name_.empty()) return;
  ::shm_unlink(name_.c_str());
  owner_ = false;
}

Result<std::uint64_t> ShmFreeBytes() {
  struct statvfs vfs {};
  if (::statvfs("/dev/shm", &vfs) != 0) return Status::FromErrno(errno, "statvfs(/dev/shm)");
  return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

std::string ShmDomain() {
  // Ranks with different values never share memory (tests simulate several hosts on one machine).
  if (const char* forced = std::getenv("COMMKIT_HOST_DOMAIN"); forced != nullptr && *forced != '\0')
    return StrCat(forced, "|COMMKIT_HOST_DOMAIN");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return StrCat(host, "|", boot, "|", ReadLink("/proc/self/ns/ipc"), "|", ReadLink("/proc/self/ns/mnt"));
}

std::string PidNamespace() { return ReadLink("/proc/self/ns/pid"); }

}  // namespace commkit::shm
