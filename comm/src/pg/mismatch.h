// Mismatched collectives: every rank compares the fingerprint of its call (kind, type, count(s), op,
// root) with everyone's before moving data, and on a difference all ranks report the same per-rank
// diff (private to commkit::comm).
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
  MismatchCheck(std::shared_ptr<Store> store, Backend& backend, Health& health, int rank, int size, std::string who)
      : store_(std::move(store)), backend_(backend), health_(health), rank_(rank), size_(size), who_(std::move(who)) {}

  // OK when every rank issues the same call at args.sequence; Mismatch with the diff otherwise. Called
  // by one thread at a time, in sequence order.
  Status Check(const CollectiveArgs& args);

  // The fingerprints differ: every rank publishes its call and reads everyone's, so all report the
  // same diff.
  Status Report(const CollectiveArgs& args);

 private:
  std::shared_ptr<Store> store_;
  Backend& backend_;
  Health& health_;
  const int rank_, size_;
  const std::string who_;
  std::uint64_t last_fp_seq_ = 0;
};

}  // namespace commkit
