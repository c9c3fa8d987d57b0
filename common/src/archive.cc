#include "commkit/common/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kMaxName = 4096;  // PATH_MAX: longer names (GNU 'L', pax path) are refused

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// The gzip (or, transparently, uncompressed) stream of the archive, with every byte counted.
class Stream {
 public:
  Stream(std::string name, std::uint64_t max_bytes) : name_(std::move(name)), max_bytes_(max_bytes) {}
  ~Stream() {
    if (gz_ != nullptr) gzclose(gz_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Status Open(std::string_view what) {
    // O_NONBLOCK: a FIFO would otherwise block the open; fstat then refuses everything but a file.
    int fd = ::open(name_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR) return Status::NotFound(StrCat(what, " ", name_, ": no such file"));
      if (err == ELOOP) return Status::InvalidArgument(StrCat(what, " ", name_, ": too many levels of symbolic links"));
      return Status::FromErrno(err, StrCat("cannot open ", what, " ", name_));
    }
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, StrCat("cannot stat ", what, " ", name_));
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(
          StrCat(what, " ", name_, " is ", DescribeFileType(st.st_mode), ", not a regular file: pass a .tar.gz file"));
    }
    // Regular files never block; clear O_NONBLOCK so reads behave normally.
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    gz_ = gzdopen(fd, "rb");
    if (gz_ == nullptr) return Status::SystemError(StrCat("cannot read ", what, " ", name_, " (zlib)"));
    closer.fd = -1;  // owned by gz_ now
    return Status::Ok();
  }

  // Reads exactly n bytes; DataLoss at a truncated end or corrupt gzip data.
  Status Read(char* out, std::size_t n, std::string_view what) {
    std::size_t done = 0;
    while (done < n) {
      const int got = gzread(gz_, out + done, static_cast<unsigned>(n - done));
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(gz_, &errnum);
        return Status::DataLoss(StrCat(what, " ", name_, ": corrupt compressed data (", msg ? msg : "zlib error", ")"));
      }
      if (got == 0) return Status::DataLoss(StrCat(what, " ", name_, ": truncated archive (ends inside a member)"));
      done += static_cast<std::size_t>(got);
    }
    read_ += n;
    if (read_ > max_bytes_) {
      return Status::InvalidArgument(StrCat(what, " ", name_, " unpacks to more than ",
                                            HumanBytes(static_cast<double>(max_bytes_)), ": not a snapshot this tool replays"));
    }
    return Status::Ok();
  }

  // true at a clean end of data (no further byte).
  bool AtEnd() {
    const int c = gzgetc(gz_);
    if (c < 0) return true;
    gzungetc(c, gz_);
    return false;
  }

 private:
  std::string name_;
  std::uint64_t max_bytes_;
  std::uint64_t read_ = 0;
  gzFile gz_ = nullptr;
};

std::string Field(const char* block, std::size_t offset, std::size_t len) {
  const char* p = block + offset;
  return std::string(p, strnlen(p, len));
}

// Octal (ustar) number; base-256 (GNU, high bit set) only for values that fit in 63 bits.
Result<std::uint64_t> Number(const char* block, std::size_t offset, std::size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(block + offset);
  if ((p[0] & 0x80) != 0) {
    std::uint64_t v = p[0] & 0x7f;
    for (std::size_t i = 1; i < len; ++i) {
      if (v >> 55) return Status::DataLoss("numeric field out of range");
      v = (v << 8) | p[i];
    }
    return v;
  }
  std::uint64_t v = 0;
  std::size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return Status::DataLoss("numeric field out of range");
    v = v * 8 + (p[i] - '0');
  }
  for (; i < len; ++i)
    if (p[i] != ' ' && p[i] != '\0') return Status::DataLoss("numeric field is not octal");
  return v;
}

bool ZeroBlock(const char* block) {
  for (std::size_t i = 0; i < kBlock; ++i)
    if (block[i] != 0) return false;
  return true;
}

bool ChecksumOk(const char* block) {
  auto stored = Number(block, 148, 8);
  if (!stored.ok()) return false;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i)
    sum += (i >= 148 && i < 156) ? static_cast<unsigned char>(' ') : static_cast<unsigned char>(block[i]);
  return sum == *stored;
}

// "./sys/class/net" -> {"sys","class","net"}; refuses absolute names, "..", NUL and over-long names.
Result<std::vector<std::string>> SafeComponents(const std::string& name) {
  if (name.size() > kMaxName) return Status::DataLoss("member name longer than 4096 bytes");
  if (!name.empty() && name[0] == '/') return Status::InvalidArgument(StrCat("member '", name, "' has an absolute name"));
  std::vector<std::string> out;
  for (auto& part : Split(name, '/', /*skip_empty=*/true)) {
    if (part == ".") continue;
    if (part == "..") return Status::InvalidArgument(StrCat("member '", name, "' climbs out of the archive with '..'"));
    out.push_back(part);
  }
  return out;
}

// Creates every directory of `parts` but the last under `dest`, refusing to go through a symlink or a
// file (a member "a" -> /etc followed by "a/passwd" must not write to /etc).
Result<fs::path> PrepareParent(const fs::path& dest, const std::vector<std::string>& parts) {
  fs::path at = dest;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    at /= parts[i];
    struct stat st {};
    if (::lstat(at.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      return Status::InvalidArgument(StrCat("member path '", Join(parts, "/"), "' goes through '",
                                            at.lexically_relative(dest).string(), "', which is ", DescribeFileType(st.st_mode)));
    }
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, StrCat("mkdir ", at.string()));
  }
  return at / parts.back();
}

// pax extended header records "LEN key=value\n": the path and linkpath keys.
Status ParsePax(const std::string& data, std::string& path, std::string& linkpath) {
  std::size_t pos = 0;
  while (pos < data.size()) {
    const std::size_t space = data.find(' ', pos);
    if (space == std::string::npos) return Status::DataLoss("malformed pax header");
    auto len = ParseInt(std::string_view(data).substr(pos, space - pos));
    if (!len || *len <= 0 || static_cast<std::size_t>(*len) > data.size() - pos ||
        static_cast<std::size_t>(*len) < space - pos + 2)
      return Status::DataLoss("malformed pax header record length");
    std::string record = data.substr(space + 1, pos + static_cast<std::size_t>(*len) - space - 2);
    pos += static_cast<std::size_t>(*len);
    const std::size_t eq = record.find('=');
    if (eq == std::string::npos) return Status::DataLoss("malformed pax header record");
    const std::string key = record.substr(0, eq);
    if (key == "path") path = record.substr(eq + 1);
    if (key == "linkpath") linkpath = record.substr(eq + 1);
  }
  return Status::Ok();
}

}  // namespace

Status ExtractTarArchive(const fs::path& archive, const fs::path& dest, std::string_view what, const ArchiveLimits& limits) {
  const std::string name = archive.string();
  // Headers and padding count too: at most two blocks of overhead per member.
  Stream in(name, limits.max_total_bytes + limits.max_members * 3 * kBlock);
  COMMKIT_RETURN_IF_ERROR(in.Open(what));
  auto fail = [&](const Status& s, const std::string& member) {
    return Status(s.code(), StrCat(what, " ", name, (member.empty() ? "" : StrCat(", member '", member, "'")), ": ", s.message(),
                                   s.code() == StatusCode::kDataLoss ? " (a damaged or truncated archive)" : ""));
  };
  std::array<char, kBlock> header{};
  std::string long_name, long_link;
  std::uint64_t members = 0, total = 0;
  std::vector<char> buf(64 * 1024);
  while (true) {
    if (in.AtEnd()) break;  // GNU tar writes two zero blocks; a missing end marker is harmless
    COMMKIT_RETURN_IF_ERROR(in.Read(header.data(), kBlock, what));
    if (ZeroBlock(header.data())) break;
    if (!ChecksumOk(header.data())) return fail(Status::DataLoss("header checksum mismatch: not a tar archive"), "");
    if (++members > limits.max_members)
      return Status::InvalidArgument(StrCat(what, " ", name, " has more than ", limits.max_members, " members"));
    const char type = header[156];
    std::string member = Field(header.data(), 0, 100);
    const std::string prefix = Field(header.data(), 345, 155);
    if (std::memcmp(header.data() + 257, "ustar", 5) == 0 && !prefix.empty()) member = prefix + "/" + member;
    std::string link = Field(header.data(), 157, 100);
    if (!long_name.empty()) member = std::move(long_name);
    if (!long_link.empty()) link = std::move(long_link);
    long_name.clear();
    long_link.clear();
    auto size_or = Number(header.data(), 124, 12);
    if (!size_or.ok()) return fail(size_or.status(), member);
    const std::uint64_t size = *size_or;
    const std::uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;
    const bool meta = type == 'L' || type == 'K' || type == 'x' || type == 'g';
    if (meta) {
      if (size > 1 << 20) return fail(Status::DataLoss("extended header larger than 1 MiB"), member);
      std::string data(static_cast<std::size_t>(padded), '\0');
      COMMKIT_RETURN_IF_ERROR(in.Read(data.data(), data.size(), what));
      data.resize(static_cast<std::size_t>(size));
      if (type == 'L') long_name = std::string(data.c_str());
      if (type == 'K') long_link = std::string(data.c_str());
      if (type == 'x') {
        if (Status s = ParsePax(data, long_name, long_link); !s.ok()) return fail(s, member);
      }
      continue;  // 'g' (global pax) holds nothing a replay needs
    }
    auto parts_or = SafeComponents(member);
    if (!parts_or.ok()) return fail(parts_or.status(), member);
    const std::vector<std::string>& parts = *parts_or;
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (!regular && type != '5' && type != '2') {
      const char* kind = type == '1' ? "a hard link" : type == '3' ? "a character device" : type == '4' ? "a block device"
                         : type == '6' ? "a FIFO" : "an unsupported entry type";
      return fail(Status::InvalidArgument(StrCat("is ", kind, "; snapshots hold only files, directories and symlinks")), member);
    }
    if (regular && size > limits.max_member_bytes) {
      return fail(Status::InvalidArgument(StrCat("is ", HumanBytes(static_cast<double>(size)), ", more than the ",
                                                 HumanBytes(static_cast<double>(limits.max_member_bytes)), " allowed per member")),
                  member);
    }
    if (regular && (total += size) > limits.max_total_bytes) {
      return Status::InvalidArgument(StrCat(what, " ", name, " unpacks to more than ",
                                            HumanBytes(static_cast<double>(limits.max_total_bytes)),
                                            ": not a snapshot this tool replays"));
    }
    if (!regular && size != 0) return fail(Status::DataLoss("directory or link entry with contents"), member);
    if (parts.empty()) {  // "./" itself
      std::uint64_t skip = padded;
      while (skip > 0) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip, buf.size()));
        COMMKIT_RETURN_IF_ERROR(in.Read(buf.data(), n, what));
        skip -= n;
      }
      continue;
    }
    auto target_or = PrepareParent(dest, parts);
    if (!target_or.ok()) return fail(target_or.status(), member);
    const fs::path& target = *target_or;
    struct stat st {};
    const bool exists = ::lstat(target.c_str(), &st) == 0;
    if (type == '5') {
      if (exists && !S_ISDIR(st.st_mode)) return fail(Status::InvalidArgument("directory member replaces a file or link"), member);
      if (!exists && ::mkdir(target.c_str(), 0700) != 0) return fail(Status::FromErrno(errno, "mkdir"), member);
    } else if (type == '2') {
      if (link.empty() || link.size() > kMaxName) return fail(Status::DataLoss("symlink with an empty or over-long target"), member);
      if (exists) return fail(Status::InvalidArgument("appears twice"), member);
      if (::symlink(link.c_str(), target.c_str()) != 0) return fail(Status::FromErrno(errno, "symlink"), member);
    } else {
      if (exists && !S_ISREG(st.st_mode)) return fail(Status::InvalidArgument("file member replaces a directory or link"), member);
      // O_NOFOLLOW | O_EXCL-free: a later member of the same name replaces the earlier one, as tar does.
      int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) return fail(Status::FromErrno(errno, "cannot create"), member);
      FdCloser closer{fd};
      std::uint64_t left = padded, data_left = size;
      while (left > 0) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
        COMMKIT_RETURN_IF_ERROR(in.Read(buf.data(), n, what));
        const std::size_t keep = static_cast<std::size_t>(std::min<std::uint64_t>(data_left, n));
        std::size_t off = 0;
        while (off < keep) {
          const ssize_t w = ::write(fd, buf.data() + off, keep - off);
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) return fail(Status::FromErrno(errno, "cannot write"), member);
          off += static_cast<std::size_t>(w);
        }
        data_left -= keep;
        left -= n;
      }
    }
  }
  return Status::Ok();
}

}  // namespace commkit
