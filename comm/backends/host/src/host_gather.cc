// The host backend's all-gather(v) and gather within a host (host_engine.h): staged through the slots,
// or single-copy, where each rank reads its peers' inputs straight into its output.
//
// Staging costs every block a copy into the owner's slot and one out of it. Once a call's data leaves
// the cache that second pass goes to memory, and a direct read of the peer's buffer moves each block
// once: between processes with process_vm_readv (cross-memory attach, the kernel copies from the
// peer's pages), between threads of one process with memcpy. 2 ranks on the 2-core development
// machine, 2 MiB pages, 16-256 MiB: staged 4.1-5.2 GB/s busbw, single-copy 5.0-7.4
// (docs/host-backend.md, "Single-copy all-gather").
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "commkit/common/strings.h"
#include "host_engine.h"

namespace commkit::comm::host {

namespace {

// What a rank announces in its round's inline line: where its block is, in which process.
struct Announce {
  std::uint64_t pid;
  std::uint64_t address;
};
static_assert(sizeof(Announce) <= ShmTransport::kInlineBytes);

// Reads `n` bytes at `from` in process `pid` into `to`. process_vm_readv copies at most what one call
// pins, and a partial count means the rest is still to read.
Status ReadFrom(pid_t pid, void* to, std::uint64_t from, std::size_t n) {
  if (pid == ::getpid()) {
    std::memcpy(to, reinterpret_cast<const void*>(from), n);
    return Status::Ok();
  }
  std::size_t done = 0;
  while (done < n) {
    iovec local{static_cast<std::uint8_t*>(to) + done, n - done};
    iovec remote{reinterpret_cast<void*>(from + done), n - done};
    const ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return Status::Internal(StrCat("process_vm_readv of ", n - done, " bytes from pid ", pid, " failed: ",
                                     got < 0 ? std::strerror(errno) : "nothing read"));
    done += static_cast<std::size_t>(got);
  }
  return Status::Ok();
}

// Under Yama's ptrace_scope 1 (Ubuntu's default) a process may read only its descendants' memory, and
// ranks are siblings. Like Open MPI's shared-memory transport (for its own process_vm_readv), each
// rank lets processes of its user read it; scope 2 and 3 still refuse, and the check below sees it.
void AllowPeerReads() {
#if defined(PR_SET_PTRACER)
  (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

}  // namespace

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
    if (Status s = ReadFrom(static_cast<pid_t>(*pid), &seen, static_cast<std::uint64_t>(*address), sizeof seen);
        !s.ok()) {
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

Status HostBackend::Gather(const CollectiveArgs& a, Deadline d) {
  const std::size_t e = SizeOf(a.dtype), p = static_cast<std::size_t>(P()), S = t_->slot_bytes();
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  const auto* send = static_cast<const std::uint8_t*>(a.send);
  const std::vector<std::size_t>& counts = Counts(a, a.kind == CollectiveKind::kAllgatherv);
  const std::vector<std::size_t>& off = Offsets(counts, e);
  std::vector<std::size_t>& bytes = Blocks(0);
  for (std::size_t q = 0; q < p; ++q) bytes[q] = counts[q] * e;
  const std::uint8_t* mine = send && send != recv ? send : recv + off[me()];
  const bool take = a.kind != CollectiveKind::kGather || me() == a.root;
  // One choice for every rank: the table is keyed by the whole output (the same on every rank).
  const bool single = single_copy_ && P() > 1 &&
                      table_.Select(CollectiveKind::kAllgather, MemoryKind::kHost, off[p]).algorithm ==
                          CollectiveAlgorithm::kSingleCopy;
  tune::NoteRun("host", single ? CollectiveAlgorithm::kSingleCopy : CollectiveAlgorithm::kFlat);
  if (single) return SingleCopyGather(a, d, mine, bytes, off, take);
  const bool stream = take && Streams(bytes[me()] + off[p]);
  return Exchange(a, d, mine, bytes, [&](std::size_t lo, const auto& src) {
    if (!take) return;
    for (std::size_t q = 0; q < p; ++q) {
      if (!src[q]) continue;
      // This rank's own block comes from its input (nothing to do in place), not back out of its slot.
      const std::uint8_t* from = q == static_cast<std::size_t>(me()) ? mine + lo : src[q];
      std::uint8_t* dst = recv + off[q] + lo;
      if (dst != from) Copy(stream, dst, from, std::min(S, bytes[q] - lo));
    }
  });
}

// One round: every rank announces its block; the takers read every peer's block; the second phase
// (SignalReduced/WaitReduced) keeps every input untouched until the last reader is done with it.
Status HostBackend::SingleCopyGather(const CollectiveArgs& a, Deadline d, const std::uint8_t* mine,
                                     const std::vector<std::size_t>& bytes, const std::vector<std::size_t>& off,
                                     bool take) {
  auto* recv = static_cast<std::uint8_t*>(a.recv);
  COMMKIT_RETURN_IF_ERROR(t_->Begin(d).status());
  const Announce own{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(mine)};
  std::memcpy(t_->InlineData(), &own, sizeof own);
  t_->Post(a.fingerprint);
  if (Status s = t_->WaitPosted(d); !s.ok()) return RoundFailed(std::move(s));
  Status read = Status::Ok();
  if (take) {
    const bool stream = Streams(bytes[me()] + off[P()]);
    for (int q = 0; q < P() && read.ok(); ++q) {
      std::uint8_t* dst = recv + off[q];
      if (q == me()) {
        if (dst != mine) Copy(stream, dst, mine, bytes[q]);
        continue;
      }
      if (bytes[q] == 0) continue;
      Announce peer;
      std::memcpy(&peer, t_->PeerInline(q), sizeof peer);
      read = ReadFrom(static_cast<pid_t>(peer.pid), dst, peer.address, bytes[q]);
      if (!read.ok()) read = Status(read.code(), StrCat("host backend: single-copy ", ToString(a.kind), ": rank ", me(),
                                                        " reading rank ", q, "'s block: ", read.message(),
                                                        " (COMMKIT_TUNE=host.", ToString(a.kind), ":*:flat stages through shared memory)"));
    }
  }
  t_->SignalReduced();
  COMMKIT_RETURN_IF_ERROR(t_->WaitReduced(d));
  t_->Finish();
  return read;
}

}  // namespace commkit::comm::host
