// The health of a group's ranks as seen through its store: each rank publishes its progress (the last
// collective it entered) with a heartbeat, and a failing rank reads everyone's to say which peers
// never reached the failed operation and which stopped responding (private to commkit::comm).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "commkit/comm/backend.h"
#include "commkit/comm/store.h"

namespace commkit {

class Health {
 public:
  // Starts the heartbeat thread. `who` names this rank in messages ("world (rank 3/8)").
  Health(std::shared_ptr<Store> store, int rank, int size, std::string who);
  ~Health() { Stop(); }
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // Stops the heartbeat thread. Idempotent.
  void Stop();

  // This rank entered collective #seq (published with the next heartbeat).
  void Entered(std::uint64_t seq) { entered_seq_.store(seq); }

  // `failure` of `args`, enriched with the ranks that had not reached the operation and the ranks
  // that stopped sending heartbeats (dead or hung). Bounded in time.
  Status Diagnose(const CollectiveArgs& args, const Status& failure);

 private:
  // One peer's "progress/<rank>" entry: the last sequence number it entered and its heartbeat time.
  struct Progress {
    bool present = false;
    std::int64_t seq = 0;
    std::int64_t when = 0;
  };
  // nullopt when the store itself is unreachable.
  std::optional<Progress> ReadProgress(int r);
  void PublishLoop();

  std::shared_ptr<Store> store_;
  const int rank_, size_;
  const std::string who_;
  std::atomic<std::uint64_t> entered_seq_{0};
  std::mutex mu_;
  std::condition_variable cv_;  // stopping only
  bool stopping_ = false;
  std::thread publisher_;
};

}  // namespace commkit
