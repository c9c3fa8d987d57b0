// The health of a group's ranks as seen through its store: each rank publishes its progress (the last
// collective it entered) with a heartbeat and its process identity, and a failing rank reads
// everyone's to say which peers never reached the failed operation and which are dead or silent
// (private to commkit::comm).
//
// Everything here is bounded in time, including when the store itself is gone (rank 0, which hosts
// it under mpirun/srun/torchrun, exited first): a store call that does not answer within its budget is
// abandoned on a detached thread that owns what it uses, never waited for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "commkit/comm/backend.h"
#include "commkit/comm/store.h"

namespace commkit {

// One rank's "progress/<rank>" entry: "<seq> <unix ms> <pid> <start ticks> <pid namespace> <failed seq>".
struct RankProgress {
  std::int64_t seq = 0;
  std::int64_t when = 0;        // unix ms of the publication (the publisher's clock)
  std::int64_t pid = 0;         // 0: not published (older writers)
  std::uint64_t start = 0;      // the process's start time in clock ticks since boot (/proc/<pid>/stat)
  std::string pid_namespace;    // boot id and pid namespace: pids compare only when this matches ours
  std::int64_t failed = 0;      // the collective this rank saw fail (0: none): it exits on its own after
};
std::string FormatProgress(const RankProgress& p);
std::optional<RankProgress> ParseProgress(std::string_view text);

// Whether the process a progress entry names is gone, judged from this host's /proc: only when it
// ran in this process's pid namespace on this boot. "exited", "is a zombie" (killed but not reaped:
// as dead as an exited one), or nullopt when it is alive or cannot be judged from here.
std::optional<std::string> DeadProcess(const RankProgress& p);

// This process's identity as published (pid, start ticks, pid namespace).
RankProgress SelfIdentity();

class Health {
 public:
  // How often a rank republishes its progress when nothing changes; a peer that does not move for
  // longer than this (plus polling) during a diagnosis is silent.
  static constexpr std::chrono::milliseconds kHeartbeat{250};
  // The longest a diagnosis waits for its peers' fresh heartbeats (the store's answers included).
  static constexpr std::chrono::milliseconds kDiagnoseBudget{800};
  // The longest Stop() waits for the heartbeat thread (it is abandoned inside a hanging store call).
  static constexpr std::chrono::milliseconds kStopWait{300};
  // A diagnosis looks at (and names) at most this many peers.
  static constexpr int kMaxNamed = 64;

  // Starts the heartbeat thread. `who` names this rank in messages ("world (rank 3/8)").
  Health(std::shared_ptr<Store> store, int rank, int size, std::string who);
  ~Health() { Stop(); }
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // Stops the heartbeat thread, waiting at most kStopWait. Idempotent.
  void Stop();

  // This rank entered collective #seq (published within 100 ms).
  void Entered(std::uint64_t seq);

  // `failure` of `args`, enriched with the ranks that had not reached the operation (from their
  // freshest progress: a live rank that reached it is never named), the ranks whose process is dead
  // (same host: /proc, zombies included) and the ranks that stopped sending heartbeats. At most
  // about kDiagnoseBudget.
  Status Diagnose(const CollectiveArgs& args, const Status& failure);

  struct Shared;  // owned jointly with the heartbeat thread

 private:
  // The process identity of peer `peer_index` (of Shared::peers), once read.
  std::optional<RankProgress> Identity(std::size_t peer_index) const;

  std::shared_ptr<Shared> shared_;
  std::thread publisher_;
  const int rank_, size_;
  const std::string who_;
};

}  // namespace commkit
