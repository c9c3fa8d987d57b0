// Reading a peer's memory directly (single_copy.h).
#include "shm/single_copy.h"

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "commkit/common/strings.h"

namespace commkit::comm {

namespace {

// Under Yama's ptrace_scope 1 (Ubuntu's default) a process may read only its descendants' memory, and
// ranks are siblings. Like Open MPI's shared-memory transport (for its own process_vm_readv), each
// rank lets processes of its user read it; scope 2 and 3 still refuse, and the check below sees it.
void AllowPeerReads() {
#if defined(PR_SET_PTRACER)
  (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

}  // namespace

PeerBuffer PeerBuffer::Of(const void* buffer) {
  return {static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(buffer)};
}

// process_vm_readv copies at most what one call pins, and a partial count means the rest is still to read.
Status ReadPeer(const PeerBuffer& from, void* to, std::size_t n) {
  const auto pid = static_cast<pid_t>(from.pid);
  if (pid == ::getpid()) {
    std::memcpy(to, reinterpret_cast<const void*>(from.address), n);
    return Status::Ok();
  }
  std::size_t done = 0;
  while (done < n) {
    iovec local{static_cast<std::uint8_t*>(to) + done, n - done};
    iovec remote{reinterpret_cast<void*>(from.address + done), n - done};
    const ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return Status::Internal(StrCat("process_vm_readv of ", n - done, " bytes from pid ", pid, " failed: ",
                                     got < 0 ? std::strerror(errno) : "nothing read"));
    done += static_cast<std::size_t>(got);
  }
  return Status::Ok();
}

Result<bool> SingleCopyPossible(const ShmExchange& exchange, int rank, std::string* why_not) {
  // A value only this rank knows, at an address the peers read: a peer in another pid namespace, or
  // one the kernel refuses (ptrace_scope, a seccomp filter, no CAP_SYS_PTRACE across users), fails here.
  AllowPeerReads();
  std::random_device rd;
  // 63 bits, so that every field is a non-negative int64 (user-space addresses are below 2^47).
  const std::uint64_t token =
      ((std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid())) & 0x7fffffffffffffffULL;
  volatile std::uint64_t canary = token;
  COMMKIT_ASSIGN_OR_RETURN(std::vector<std::string> where,
                           exchange("single-copy", StrCat(::getpid(), " ", reinterpret_cast<std::uintptr_t>(&canary),
                                                          " ", token)));
  std::string verdict = "ok";
  for (int q = 0; q < static_cast<int>(where.size()) && verdict == "ok"; ++q) {
    if (q == rank) continue;
    const std::vector<std::string> f = Split(where[q], ' ');
    const auto pid = f.size() == 3 ? ParseInt(f[0]) : std::nullopt;
    const auto address = f.size() == 3 ? ParseInt(f[1]) : std::nullopt;
    const auto expected = f.size() == 3 ? ParseInt(f[2]) : std::nullopt;
    if (!pid || !address || !expected) {
      verdict = StrCat("rank ", q, " announced '", where[q], "'");
      continue;
    }
    std::uint64_t seen = 0;
    const PeerBuffer peer{static_cast<std::uint64_t>(*pid), static_cast<std::uint64_t>(*address)};
    if (Status s = ReadPeer(peer, &seen, sizeof seen); !s.ok()) {
      verdict = StrCat("reading rank ", q, ": ", s.message());
    } else if (seen != static_cast<std::uint64_t>(*expected)) {
      verdict = StrCat("rank ", q, "'s pid ", *pid, " is another process here (a different pid namespace)");
    }
  }
  // Every rank must choose alike, and no rank may leave (taking its canary along) before every peer read it.
  COMMKIT_ASSIGN_OR_RETURN(std::vector<std::string> verdicts, exchange("single-copy-read", verdict));
  for (int q = 0; q < static_cast<int>(verdicts.size()); ++q) {
    if (verdicts[q] == "ok") continue;
    if (why_not != nullptr) *why_not = StrCat("rank ", q, ": ", verdicts[q]);
    return false;
  }
  (void)canary;
  return true;
}

}  // namespace commkit::comm
