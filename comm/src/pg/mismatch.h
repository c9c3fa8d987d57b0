// Mismatched collectives: every rank compares the fingerprint of its call (kind, type, count(s), op,
// root) with everyone's, and on a difference all ranks report the same per-rank diff (private to
// commkit::comm).
//
// Three ways, cheapest first:
//  - the backend compares on its own communicator together with the collective
//    (Backend::ChecksMismatchOnCompletion, NCCL): no store traffic unless the fingerprints differ;
//    the Work fails at completion (Deferred);
//  - the backend reduces host int64: a 16-byte MAX all-reduce before the collective (Check);
//  - neither: through the store, one Set, an N-key MultiGet and a Delete per collective (Check).
// The per-rank diff always goes through the store, on the error path only (Report).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "commkit/comm/backend.h"
#include "commkit/comm/store.h"
#include "health.h"

namespace commkit {

class MismatchCheck {
 public:
  // `health` enriches a failure of the exchange itself; `who` names this rank in messages.
  MismatchCheck(std::shared_ptr<Store> store, Backend& backend, Health& health, int rank, int size, std::string who);

  // OK when every rank issues the same call at args.sequence; Mismatch with the diff otherwise. Called
  // by one thread at a time, in sequence order. Not for calls with args.check_fingerprint (Deferred).
  Status Check(const CollectiveArgs& args);

  // The fingerprints differ: every rank publishes its call and reads everyone's, so all report the
  // same diff.
  Status Report(const CollectiveArgs& args) const;

  // The Work of a collective the backend checks on its own communicator (args.check_fingerprint):
  // it completes with `inner`. When `inner` ends with kMismatch, its status becomes Report()'s diff;
  // when it ends with kTimeout (the collective hung before the backend could tell), the ranks' calls
  // are compared through the store and a difference is reported as the mismatch it is. Safe to keep
  // after the group is gone (it holds the store, not the group).
  std::unique_ptr<Work> Deferred(const CollectiveArgs& args, std::unique_ptr<Work> inner) const;

  // What the store exchange of Report() shares with deferred Works.
  struct Reporter;

 private:
  std::shared_ptr<const Reporter> reporter_;
  std::shared_ptr<Store> store_;
  Backend& backend_;
  Health& health_;
  const int rank_, size_;
  std::uint64_t last_fp_seq_ = 0;
};

}  // namespace commkit
