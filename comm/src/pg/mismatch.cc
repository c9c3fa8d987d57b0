#include "mismatch.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "commkit/common/strings.h"
#include "validate.h"

namespace commkit {

using std::chrono::milliseconds;

// Every rank contributes [h, -h] of its call's fingerprint to a MAX allreduce: max(h) == -max(-h)
// exactly when all ranks agree. Cost: one 16-byte allreduce per operation.
Status MismatchCheck::Check(const CollectiveArgs& args) {
  std::int64_t h = static_cast<std::int64_t>(args.fingerprint);
  // Backends that cannot reduce host memory (NCCL) compare fingerprints through the store instead:
  // one Set and one MultiGet per operation (and the previous key is deleted, so the store stays small).
  if (!backend_.Supports(CollectiveKind::kAllreduce, DataType::kInt64, MemoryKind::kHost, ReduceKind::kMax)) {
    std::string mine = std::to_string(h);
    COMMKIT_RETURN_IF_ERROR(store_->Set(StrCat("fp/", args.sequence, "/", rank_), mine).WithContext(who_));
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
  std::int64_t buf[2] = {h, -h};
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
  if (buf[0] == -buf[1]) return Status::Ok();
  return Report(args);
}

Status MismatchCheck::Report(const CollectiveArgs& args) {
  std::string key = StrCat("mismatch/", args.sequence, "/");
  (void)store_->Set(key + std::to_string(rank_), Describe(args));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key + std::to_string(r));
  auto all = store_->MultiGet(keys, std::min<milliseconds>(args.timeout, std::chrono::seconds(60)));
  std::string diff;
  if (all.ok()) {
    for (int r = 0; r < size_; ++r) diff += StrCat("\n  rank ", r, ": ", (*all)[r]);
    // Nobody returns (and maybe exits, taking the store along when it hosts it) before every rank
    // has read the diff; bounded, in case a rank died meanwhile.
    const std::string done = key + "read";
    if (store_->Add(done, 1).ok()) {
      for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
           std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
        auto n = store_->Add(done, 0);
        if (!n.ok() || *n >= size_) break;
      }
    }
  } else {
    diff = StrCat("\n  this rank: ", Describe(args), " (others unavailable: ", all.status().message(), ")");
  }
  return Status::Mismatch(StrCat(who_, ": ", ToString(args.kind), " #", args.sequence,
                                 ": ranks called different collectives at the same "
                                 "sequence number (different op, type, count or root):",
                                 diff, "\n  Every rank must issue the same collectives in the same order."));
}

}  // namespace commkit
