#include "mismatch.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "commkit/common/strings.h"
#include "validate.h"

namespace commkit {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct MismatchCheck::Reporter {
  // How long a rank whose collective timed out waits for the others' calls (they time out too, at
  // about the same time, unless they are gone).
  static constexpr milliseconds kExplainBound{10'000};

  std::shared_ptr<Store> store;
  int rank = 0, size = 1;
  std::string who;

  // Publishes this rank's call under "mismatch/<seq>/<rank>" and reads every rank's, waiting at most
  // `bound`. Keys are the same for Report and Explain, so ranks on either path see each other.
  Result<std::vector<std::string>> Exchange(const CollectiveArgs& args, milliseconds bound) const {
    const std::string key = StrCat("mismatch/", args.sequence, "/");
    (void)store->Set(key + std::to_string(rank), Describe(args));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(key + std::to_string(r));
    auto all = store->MultiGet(keys, bound);
    if (!all.ok()) return all.status();
    // Nobody returns (and maybe exits, taking the store along when it hosts it) before every rank
    // has read the diff; bounded, in case a rank died meanwhile.
    const std::string done = key + "read";
    if (store->Add(done, 1).ok()) {
      for (auto until = Clock::now() + std::chrono::seconds(2); Clock::now() < until;
           std::this_thread::sleep_for(milliseconds(5))) {
        auto n = store->Add(done, 0);
        if (!n.ok() || *n >= size) break;
      }
    }
    return all;
  }

  std::string Diff(const std::vector<std::string>& all) const {
    std::string diff;
    for (int r = 0; r < size; ++r) diff += StrCat("\n  rank ", r, ": ", all[r]);
    return diff;
  }

  Status Mismatch(const CollectiveArgs& args, const std::string& diff, std::string_view note = {}) const {
    return Status::Mismatch(StrCat(who, ": ", ToString(args.kind), " #", args.sequence,
                                   ": ranks called different collectives at the same "
                                   "sequence number (different op, type, count or root)", note, ":", diff,
                                   "\n  Every rank must issue the same collectives in the same order."));
  }

  // The diff. Checked before the collective, every rank gets here at about the same time; checked at
  // completion, a rank whose collective hung gets here only after its own timeout, so the others
  // wait that long (and a little more) for its call.
  Status Report(const CollectiveArgs& args) const {
    const milliseconds bound = args.check_fingerprint ? args.timeout + kExplainBound
                                                      : std::min<milliseconds>(args.timeout, std::chrono::seconds(60));
    auto all = Exchange(args, bound);
    if (all.ok()) return Mismatch(args, Diff(*all));
    return Mismatch(args, StrCat("\n  this rank: ", Describe(args), " (others unavailable: ", all.status().message(), ")"));
  }

  // A collective checked on the communicator timed out before the check could tell: the ranks that
  // are still there compare their calls through the store. A difference is the likely cause of the
  // hang and is reported as a mismatch; otherwise (or when some rank does not answer within
  // kExplainBound) `failure` stands.
  Status Explain(const CollectiveArgs& args, const Status& failure) const {
    auto all = Exchange(args, std::min<milliseconds>(args.timeout, kExplainBound));
    if (!all.ok()) return failure;
    if (std::all_of(all->begin(), all->end(), [&](const std::string& v) { return v == all->front(); })) return failure;
    return Mismatch(args, Diff(*all), StrCat(" and the collective hung (", failure.message(), ")"));
  }
};

MismatchCheck::MismatchCheck(std::shared_ptr<Store> store, Backend& backend, Health& health, int rank, int size,
                             std::string who)
    : reporter_(std::make_shared<const Reporter>(Reporter{store, rank, size, std::move(who)})),
      store_(std::move(store)),
      backend_(backend),
      health_(health),
      rank_(rank),
      size_(size) {}

// Every rank contributes [h, ~h] of its call's fingerprint to a MAX allreduce: max(~h) == ~min(h),
// so max(h) == ~max(~h) exactly when all ranks agree. Cost: one 16-byte allreduce per operation.
Status MismatchCheck::Check(const CollectiveArgs& args) {
  std::int64_t h = static_cast<std::int64_t>(args.fingerprint);
  // Backends that cannot reduce host memory and cannot check on their own communicator compare
  // fingerprints through the store instead: one Set and one MultiGet per operation (and the previous
  // key is deleted, so the store stays small).
  if (!backend_.Supports(CollectiveKind::kAllreduce, DataType::kInt64, MemoryKind::kHost, ReduceKind::kMax)) {
    std::string mine = std::to_string(h);
    COMMKIT_RETURN_IF_ERROR(store_->Set(StrCat("fp/", args.sequence, "/", rank_), mine).WithContext(reporter_->who));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(StrCat("fp/", args.sequence, "/", r));
    auto all = store_->MultiGet(keys, args.timeout);
    if (!all.ok()) return health_.Diagnose(args, all.status());
    // Everyone wrote #seq after reading #seq-1: this rank's previous key is no longer needed.
    if (last_fp_seq_ != 0) (void)store_->Delete(StrCat("fp/", last_fp_seq_, "/", rank_));
    last_fp_seq_ = args.sequence;
    bool same = true;
    for (const auto& v : *all) same = same && v == mine;
    if (same) return Status::Ok();
    return Report(args);
  }
  std::int64_t buf[2] = {h, ~h};
  CollectiveArgs fp;
  fp.kind = CollectiveKind::kAllreduce;
  fp.send = buf;
  fp.recv = buf;
  fp.count = 2;
  fp.dtype = DataType::kInt64;
  fp.op = ReduceOp::Max();
  fp.timeout = args.timeout;
  fp.sequence = args.sequence;
  fp.tag = 0;
  auto work = backend_.Run(fp);
  Status s = work.ok() ? (*work)->Wait(args.timeout + std::chrono::seconds(5)) : work.status();
  if (!s.ok()) return health_.Diagnose(args, s);
  if (buf[0] == ~buf[1]) return Status::Ok();
  return Report(args);
}

Status MismatchCheck::Report(const CollectiveArgs& args) const { return reporter_->Report(args); }

namespace {

// Completes with the backend's Work; turns its kMismatch (or a kTimeout that a store comparison
// explains) into the per-rank diff. The store exchange blocks (all ranks publish and read), so it
// runs once, on its own thread, started by the first call that sees the failure; Wait/Synchronize
// wait for it within their timeout, Test() never does.
class DeferredCheckWork final : public Work {
 public:
  DeferredCheckWork(std::shared_ptr<const MismatchCheck::Reporter> reporter, const CollectiveArgs& args,
                    std::unique_ptr<Work> inner)
      : shared_(std::make_shared<Shared>()), inner_(std::move(inner)) {
    shared_->reporter = std::move(reporter);
    shared_->args = args;
  }

  bool Test() override {
    if (!inner_->Test()) return false;
    return Resolve(milliseconds(0)).has_value();
  }

  Status Wait(milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    Status s = inner_->Wait(timeout);
    return Finish(std::move(s), until, timeout);
  }

  Status Synchronize(milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    Status s = inner_->Synchronize(timeout);
    return Finish(std::move(s), until, timeout);
  }

  Status status() const override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->resolved ? shared_->final : inner_->status();
  }

  std::chrono::nanoseconds Duration() const override { return inner_->Duration(); }
  std::uint64_t Sequence() const override { return inner_->Sequence(); }

 private:
  struct Shared {
    std::shared_ptr<const MismatchCheck::Reporter> reporter;
    CollectiveArgs args;
    std::mutex mu;
    std::condition_variable cv;
    bool started = false, resolved = false;
    Status final;
  };

  static bool NeedsReport(const Status& s) {
    return s.code() == StatusCode::kMismatch || s.code() == StatusCode::kTimeout;
  }

  // `s` is what inner_ answered; a kTimeout of the wait itself (inner_ not done) stays as it is.
  Status Finish(Status s, Clock::time_point until, milliseconds timeout) {
    if (!NeedsReport(s) || !inner_->Test()) return s;
    auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (auto final = Resolve(std::max(left, milliseconds(0)))) return *final;
    return Status::Timeout(StrCat(shared_->reporter->who, ": ", ToString(shared_->args.kind), " #",
                                  shared_->args.sequence, " failed (", s.message(), "); the per-rank comparison "
                                  "of the calls did not finish within the wait of ", timeout.count(), " ms"));
  }

  // inner_ is done: its status, or the report that replaces it (nullopt while that is being gathered
  // longer than `wait`).
  std::optional<Status> Resolve(milliseconds wait) {
    Status inner = inner_->status();
    if (!NeedsReport(inner)) return inner;
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (!shared_->started) {
      shared_->started = true;
      std::thread([shared = shared_, inner] {
        const auto& r = *shared->reporter;
        Status final = inner.code() == StatusCode::kMismatch ? r.Report(shared->args) : r.Explain(shared->args, inner);
        {
          std::lock_guard<std::mutex> l(shared->mu);
          shared->final = std::move(final);
          shared->resolved = true;
        }
        shared->cv.notify_all();
      }).detach();
    }
    if (!shared_->cv.wait_for(lock, wait, [&] { return shared_->resolved; })) return std::nullopt;
    return shared_->final;
  }

  std::shared_ptr<Shared> shared_;
  std::unique_ptr<Work> inner_;
};

}  // namespace

std::unique_ptr<Work> MismatchCheck::Deferred(const CollectiveArgs& args, std::unique_ptr<Work> inner) const {
  return std::make_unique<DeferredCheckWork>(reporter_, args, std::move(inner));
}

}  // namespace commkit
