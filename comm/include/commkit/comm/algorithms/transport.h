// The one point-to-point interface the collective algorithms (algorithms.h) run over. Backends
// implement it on their own messaging: MPI point-to-point (the mpi backend), UCX tagged messages
// (the host backend between hosts), threads in one process (the tests).
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::comm::algorithms {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// One message of an exchange: send `bytes` from `data` to `peer`, or receive exactly `bytes` from
// `peer` into `out`. Zero-byte messages are still sent and received (they synchronise).
struct Message {
  bool send = false;
  int peer = 0;
  const void* data = nullptr;  // send
  void* out = nullptr;         // receive
  std::size_t bytes = 0;

  static Message Send(int peer, const void* buf, std::size_t bytes) { return {true, peer, buf, nullptr, bytes}; }
  static Message Recv(int peer, void* buf, std::size_t bytes) { return {false, peer, nullptr, buf, bytes}; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Posts every message and returns once all of them completed, the deadline passed, or the transport
  // failed (then the collective returns that status; its peers may be mid-step, so the caller treats
  // the group as broken). Messages from one rank to another are matched in the order they are posted,
  // across calls; a receive expecting a size other than the message's is the transport's error.
  // Called from one thread at a time per transport.
  virtual Status Exchange(std::span<Message> messages, Deadline deadline) = 0;
};

// The ranks a collective runs among, in algorithm order, and this rank's position among them. Ring
// algorithms pass data from position i to i+1; recursive ones pair positions at distance 1 first, so
// neighbours that share a host keep the biggest exchanges on it.
class Group {
 public:
  // Every transport rank 0..size-1, in rank order.
  Group(int rank, int size) : index_(rank), size_(size) {}
  // The transport ranks `ranks` in this order; `rank` must be one of them (else index() is -1).
  Group(std::vector<int> ranks, int rank);

  int size() const { return size_; }
  int index() const { return index_; }
  // The transport rank at position `i`.
  int rank(int i) const { return ranks_.empty() ? i : ranks_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<int> ranks_;  // empty: the identity
  int index_;
  int size_;
};

}  // namespace commkit::comm::algorithms
