// The job-wide board commkit-run launchers share through node 0's TcpStore: the first rank failure
// on any node, and each node's completion. Every launcher publishes its own first failure and polls
// for the others', so a failure on one node stops the ranks on every node and every launcher exits
// non-zero naming the node and rank that failed first.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "commkit/comm/tcp_store.h"
#include "commkit/common/status.h"

namespace commkit::run {

struct BoardOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;       // the first candidate (see StorePortCandidates); 0 on one node: any free port
  std::string token;
  bool host = false;         // node 0: host the store
  std::chrono::milliseconds connect_timeout{300'000};  // other nodes: how long to look for node 0's store
};

struct RemoteFailure {
  int node = -1;
  int rank = -1;
  int exit_code = 1;         // what the launchers exit with
  std::string what;          // "exited with code 3", "was killed by signal 9 (SIGKILL: Killed)"
};

class FailureBoard {
 public:
  static Result<std::unique_ptr<FailureBoard>> Open(const BoardOptions& options);

  int port() const { return store_->port(); }
  bool hosting() const { return store_->server() != nullptr; }

  // Publishes this node's first failure unless another node's came first; returns the failure that
  // is first job-wide.
  RemoteFailure Publish(const RemoteFailure& local);
  // Another node's failure, if one was published. Also reports node 0's store becoming unreachable
  // for longer than 10 s (node 0's launcher is gone) as a failure of node 0.
  std::optional<RemoteFailure> Poll();
  // Other nodes: a heartbeat (call it about once a second while the launcher runs), so node 0 can
  // tell a launcher that is gone from one that is still working.
  void Beat();
  // Records that this node's ranks are all done, with the launcher's exit code.
  void NodeDone(int exit_code);
  // Node 0: keeps the store up until every node reported done, bounded by `timeout` (other nodes'
  // ranks may still use the store after node 0's ranks are done). Ends early when a node's launcher
  // has gone silent for 10 s without reporting done.
  void WaitForNodes(std::chrono::milliseconds timeout);

 private:
  explicit FailureBoard(BoardOptions options, std::unique_ptr<TcpStore> store)
      : options_(std::move(options)), store_(std::move(store)) {}
  BoardOptions options_;
  std::unique_ptr<TcpStore> store_;
  std::optional<std::chrono::steady_clock::time_point> unreachable_since_;
};

}  // namespace commkit::run
