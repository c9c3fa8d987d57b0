#include "failure_board.h"

#include <cstdio>

#include "commkit/comm/rendezvous.h"
#include "commkit/common/strings.h"

namespace commkit::run {

namespace {

constexpr char kFailureKey[] = "commkit-run/failure";
using Clock = std::chrono::steady_clock;
// A launcher that has beaten and then stays silent this long is gone (killed, its host down): node 0
// stops waiting for it at the exit barrier. Launchers beat every second (FailureBoard::Beat).
constexpr auto kLauncherGone = std::chrono::seconds(10);

std::string DoneKey(int node) { return StrCat("commkit-run/node/", node, "/done"); }
std::string BeatKey(int node) { return StrCat("commkit-run/node/", node, "/beat"); }

// "node|rank|code|what"
std::string Encode(const RemoteFailure& f) { return StrCat(f.node, "|", f.rank, "|", f.exit_code, "|", f.what); }

std::optional<RemoteFailure> Decode(const std::string& text) {
  auto parts = Split(text, '|');
  if (parts.size() < 4) return std::nullopt;
  auto node = ParseInt(parts[0]), rank = ParseInt(parts[1]), code = ParseInt(parts[2]);
  if (!node || !rank || !code) return std::nullopt;
  RemoteFailure f;
  f.node = static_cast<int>(*node);
  f.rank = static_cast<int>(*rank);
  f.exit_code = static_cast<int>(*code);
  f.what = text.substr(parts[0].size() + parts[1].size() + parts[2].size() + 3);
  return f;
}

}  // namespace

Result<std::unique_ptr<FailureBoard>> FailureBoard::Open(const BoardOptions& o) {
  std::unique_ptr<TcpStore> store;
  if (o.host && o.master_port == 0) {
    TcpStoreOptions t;
    t.is_server = true;
    t.port = 0;
    t.bind_host = "127.0.0.1";
    t.token = o.token;
    COMMKIT_ASSIGN_OR_RETURN(store, TcpStore::Create(t));
  } else {
    JobStoreOptions j;
    j.host = o.host ? "127.0.0.1" : o.master_addr;  // node 0 checks its own server on loopback
    j.ports = StorePortCandidates(o.master_port, {});
    j.is_server = o.host;
    j.bind_host = o.nnodes > 1 ? "0.0.0.0" : "127.0.0.1";
    j.token = o.token;
    j.timeout = o.connect_timeout;
    if (!o.host)
      std::fprintf(stderr, "commkit-run: node %d: looking for node 0's store at %s:%d\n", o.node_rank,
                   o.master_addr.c_str(), o.master_port);
    COMMKIT_ASSIGN_OR_RETURN(store, OpenJobTcpStore(j));
  }
  // Polls and publications must never stall the launcher's loop for long.
  store->set_timeout(std::chrono::seconds(5));
  return std::unique_ptr<FailureBoard>(new FailureBoard(o, std::move(store)));
}

RemoteFailure FailureBoard::Publish(const RemoteFailure& local) {
  auto now = store_->CompareSet(kFailureKey, "", Encode(local));
  if (now.ok()) {
    if (auto first = Decode(*now)) return *first;
  }
  return local;
}

std::optional<RemoteFailure> FailureBoard::Poll() {
  auto present = store_->Check({kFailureKey});
  if (!present.ok()) {
    if (hosting()) return std::nullopt;
    auto now = Clock::now();
    if (!unreachable_since_) unreachable_since_ = now;
    if (now - *unreachable_since_ > std::chrono::seconds(10)) {
      RemoteFailure f;
      f.node = 0;
      f.exit_code = 1;
      f.what = StrCat("is unreachable: node 0's launcher and its store are gone (", present.status().message(), ")");
      return f;
    }
    return std::nullopt;
  }
  unreachable_since_.reset();
  if (!*present) return std::nullopt;
  auto value = store_->Get(kFailureKey, std::chrono::seconds(1));
  if (!value.ok()) return std::nullopt;
  auto f = Decode(*value);
  if (f && f->node == options_.node_rank) return std::nullopt;  // ours
  return f;
}

void FailureBoard::Beat() {
  if (hosting() || unreachable_since_) return;  // Poll() reports an unreachable node 0
  (void)store_->Add(BeatKey(options_.node_rank), 1);
}

void FailureBoard::NodeDone(int exit_code) {
  (void)store_->Set(DoneKey(options_.node_rank), std::to_string(exit_code));
}

void FailureBoard::WaitForNodes(std::chrono::milliseconds timeout) {
  if (!hosting() || options_.nnodes <= 1) return;
  std::vector<std::string> keys;
  for (int n = 0; n < options_.nnodes; ++n) keys.push_back(DoneKey(n));
  auto all = store_->Check(keys);
  if (all.ok() && *all) return;
  std::fprintf(stderr, "commkit-run: node 0: keeping the job's store up for up to %.0f s until every node is done "
                       "(--exit-barrier-timeout)\n", timeout.count() / 1000.0);
  const auto start = Clock::now(), deadline = start + timeout;
  // Per node: the last heartbeat value seen and when it changed. A node never seen may still be
  // starting: it is waited for up to the timeout; one that beat and went silent is gone.
  std::vector<std::string> beat(options_.nnodes);
  std::vector<Clock::time_point> changed(options_.nnodes, start);
  while (true) {
    auto slice = std::min<Clock::duration>(std::chrono::seconds(1), std::max<Clock::duration>(deadline - Clock::now(), {}));
    Status s = store_->Wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(slice));
    if (s.ok()) return;
    auto now = Clock::now();
    if (s.code() != StatusCode::kTimeout || now >= deadline) {
      std::fprintf(stderr, "commkit-run: node 0: stopping the job's store although not every node finished: %s\n",
                   s.message().c_str());
      return;
    }
    for (int n = 1; n < options_.nnodes; ++n) {
      auto done = store_->Check({DoneKey(n)});
      if (!done.ok() || *done) continue;
      auto has_beat = store_->Check({BeatKey(n)});
      if (!has_beat.ok() || !*has_beat) continue;
      auto value = store_->Get(BeatKey(n), std::chrono::seconds(1));
      if (!value.ok()) continue;
      if (*value != beat[n]) {
        beat[n] = *value;
        changed[n] = now;
      } else if (now - changed[n] > kLauncherGone) {
        std::fprintf(stderr,
                     "commkit-run: node 0: node %d's launcher is gone (no heartbeat for %.0f s, not done): stopping "
                     "the job's store\n",
                     n, std::chrono::duration<double>(now - changed[n]).count());
        return;
      }
    }
  }
}

}  // namespace commkit::run
