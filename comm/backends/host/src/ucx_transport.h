// The host backend's transport between hosts: UCX (libucp) tagged messages between every pair of
// ranks, over whatever UCX picks (TCP here; InfiniBand/RoCE where present). Endpoints use UCX's peer
// error handling, so a dead peer completes pending requests with an error instead of hanging. Every
// wait is bounded by a deadline. Thread-safe (one lock around the UCX worker). Private to commkit::comm;
// built when COMMKIT_HAVE_UCX; libucp itself is loaded when the first group spanning hosts connects
// (ucx_api.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/backend.h"

namespace commkit::comm::host {

class UcxTransport {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Collective over the group: creates a UCX worker, exchanges worker addresses through the store and
  // connects an endpoint to every peer. COMMKIT_SOCKET_IFNAME (when UCX_NET_DEVICES is unset) picks
  // the network device.
  static Result<std::unique_ptr<UcxTransport>> Connect(const BackendContext& context);
  ~UcxTransport();

  int rank() const;
  int size() const;

  // One message of a batch: send `bytes` from buf to `peer`, or receive up to `bytes` from `peer`
  // (a longer message is an error; `received` says how many came).
  struct Op {
    bool send = false;
    int peer = 0;
    const void* buf = nullptr;  // send
    void* out = nullptr;        // receive
    std::size_t bytes = 0;
    std::size_t received = 0;
    std::uint32_t step = 0;  // added to Run's step for this op's tag
  };
  // Posts every op with tag (channel, sequence, step + op.step) and waits until all completed, or the
  // deadline. Zero-byte ops are not sent (both sides know the sizes). channel 0: collectives (sequence
  // = the collective's, step = the message's number between the pair); 1: send/recv (step = the user's
  // tag). Errors name the peer.
  Status Run(std::vector<Op>& ops, int channel, std::uint64_t sequence, std::uint32_t step, Deadline deadline);

  void Abort(std::string_view reason);

 private:
  UcxTransport();
  Result<std::string> StartWorker();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace commkit::comm::host
