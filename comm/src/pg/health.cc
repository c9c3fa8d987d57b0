#include "health.h"

#include <chrono>
#include <vector>

#include "commkit/common/strings.h"
#include "validate.h"

namespace commkit {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::int64_t UnixMs() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string OpName(const CollectiveArgs& args) { return StrCat(ToString(args.kind), " #", args.sequence); }

}  // namespace

Health::Health(std::shared_ptr<Store> store, int rank, int size, std::string who)
    : store_(std::move(store)), rank_(rank), size_(size), who_(std::move(who)) {
  publisher_ = std::thread([this] { PublishLoop(); });
}

void Health::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

std::optional<Health::Progress> Health::ReadProgress(int r) {
  std::string key = StrCat("progress/", r);
  auto present = store_->Check({key});
  if (!present.ok()) return std::nullopt;
  Progress p;
  if (!*present) return p;
  auto v = store_->Get(key, std::chrono::seconds(2));
  if (!v.ok()) return p;
  auto parts = commkit::Split(*v, ' ');
  auto seq = parts.size() == 2 ? ParseInt(parts[0]) : std::nullopt;
  auto when = parts.size() == 2 ? ParseInt(parts[1]) : std::nullopt;
  if (!seq || !when) return p;
  p.present = true;
  p.seq = *seq;
  p.when = *when;
  return p;
}

// Enriches a failure with the ranks that had not reached this operation and the ranks that stopped
// sending heartbeats (dead or hung) — from the progress keys. Every rank publishes a heartbeat each
// second, so a peer whose heartbeat does not move for kSilence is named as silent; the wait for that
// happens only on this failure path and is bounded by kSilence.
Status Health::Diagnose(const CollectiveArgs& args, const Status& failure) {
  constexpr auto kSilence = std::chrono::milliseconds(2500);
  constexpr int kMaxNamed = 64;
  std::vector<std::string> behind;
  std::vector<int> peers;
  std::vector<Progress> first;
  std::int64_t now = UnixMs();
  bool store_ok = true;
  for (int r = 0; r < size_ && static_cast<int>(peers.size()) < kMaxNamed; ++r) {
    if (r == rank_) continue;
    auto p = ReadProgress(r);
    if (!p) {
      store_ok = false;  // the store itself is gone: say nothing more
      break;
    }
    peers.push_back(r);
    first.push_back(*p);
  }
  // Heartbeats: which peers stay silent (only worth waiting for on errors other than our own timeout
  // of a healthy-but-late peer; it is bounded either way).
  std::vector<bool> silent(peers.size(), false);
  if (store_ok && !peers.empty()) {
    auto deadline = Clock::now() + kSilence;
    std::vector<bool> moved(peers.size(), false);
    std::size_t unmoved = peers.size();
    while (unmoved > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (moved[i]) continue;
        auto p = ReadProgress(peers[i]);
        if (!p) {
          unmoved = 0;
          break;
        }
        if (p->present && (!first[i].present || p->when != first[i].when || p->seq != first[i].seq)) {
          moved[i] = true;
          --unmoved;
        }
      }
    }
    for (std::size_t i = 0; i < peers.size(); ++i) silent[i] = !moved[i] && Clock::now() >= deadline;
  }
  std::vector<std::string> dead;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const int r = peers[i];
    const Progress& p = first[i];
    if (!p.present) {
      behind.push_back(StrCat(r, " (never started an operation)"));
      continue;
    }
    std::string silence = silent[i] ? StrCat(", no heartbeat for ", HumanSeconds((now - p.when) / 1000.0 + 2.5),
                                              ": dead or hung?")
                                    : "";
    if (static_cast<std::uint64_t>(p.seq) < args.sequence) {
      behind.push_back(StrCat(r, " (last at #", p.seq, silence, ")"));
    } else if (silent[i]) {
      dead.push_back(StrCat(r, " (inside #", p.seq, silence, ")"));
    }
  }
  std::string msg = StrCat(who_, ": ", OpName(args), " (", Describe(args), ") failed: ", failure.message());
  if (!behind.empty()) msg += StrCat("; ranks that never reached ", OpName(args), ": ", Join(behind, ", "));
  if (!dead.empty()) msg += StrCat("; ranks that stopped responding: ", Join(dead, ", "));
  return Status(failure.code(), msg);
}

// Publishes "progress/<rank>" = "<last entered seq> <unix ms>": on change (at most every 100 ms) and
// as a heartbeat every second, so a failing rank can tell lagging peers from dead ones.
void Health::PublishLoop() {
  std::uint64_t published = ~0ull;
  auto last = Clock::now() - std::chrono::seconds(10);
  std::string key = StrCat("progress/", rank_);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, milliseconds(100), [&] { return stopping_; })) return;
    }
    std::uint64_t seq = entered_seq_.load();
    if (seq == published && Clock::now() - last < std::chrono::seconds(1)) continue;
    if (store_->Set(key, StrCat(seq, " ", UnixMs())).ok()) {
      published = seq;
      last = Clock::now();
    }
  }
}

}  // namespace commkit
