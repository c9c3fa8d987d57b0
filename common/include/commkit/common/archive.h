// Bounded extraction of a .tar.gz (or plain .tar) that a user names, e.g. a gpudoctor snapshot or a
// commkit-topo capture. The archive is untrusted: only regular files, directories and symlinks are
// created, never above the destination (no absolute names, no "..", no member written through a
// symlink), with private modes (0600/0700), and the total size, member size and member count are
// capped so a small archive cannot fill the disk. Hard links, FIFOs and devices are refused with an
// error naming the member. The archive itself must be a regular file (a FIFO is refused, not read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

struct ArchiveLimits {
  std::uint64_t max_total_bytes = 512ull << 20;  // all members' contents together
  std::uint64_t max_member_bytes = 128ull << 20;  // one member
  std::uint64_t max_members = 500000;             // entries of any type
};

// Extracts `archive` into the existing directory `dest` (normally a fresh TempDir). `what` names the
// input in errors ("snapshot", "capture"). On error, `dest` may hold part of the members: the caller
// removes it (TempDir does).
Status ExtractTarArchive(const std::filesystem::path& archive, const std::filesystem::path& dest, std::string_view what,
                         const ArchiveLimits& limits = {});

}  // namespace commkit
