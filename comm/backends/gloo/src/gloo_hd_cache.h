// Private to the gloo backend: Gloo's old-style halving-doubling all-reduce, built once per shape and
// reused across calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include <gloo/context.h>

#include "commkit/comm/reduce_kernels.h"

namespace commkit::comm::gloo {

// Building ::gloo::AllreduceHalvingDoubling<T> registers its pair buffers on fresh slots. Built per
// call, a peer's first message usually arrives before the buffer for its slot is registered, and
// Gloo's event loop then polls for the registration (it expects this only at start-up): on two
// oversubscribed cores that cost 350-1660 us per small call, against ~100 us for Gloo's ring. So each
// template instance is built once per (element size, element count) and kept.
//
// Every rank must build (and evict) at the same calls, because each build draws the next slots of the
// shared context: the key holds only what every rank's call agrees on (not the caller's pointer), and
// each entry reduces in a buffer of its own that the caller's data is copied into and out of. Eviction
// is least-recently-used by call order, the same on every rank. The reduction is chosen per call
// (ReduceFunction), so one entry serves every dtype and op of its element size.
class HalvingDoublingCache {
 public:
  // At most `max_entries` shapes and about `max_bytes` of their buffers are kept; one shape larger than
  // `max_bytes` is still kept, alone.
  HalvingDoublingCache(std::shared_ptr<::gloo::Context> context, std::size_t max_entries, std::size_t max_bytes);
  ~HalvingDoublingCache();
  HalvingDoublingCache(const HalvingDoublingCache&) = delete;
  HalvingDoublingCache& operator=(const HalvingDoublingCache&) = delete;

  // All-reduce of `count` elements of `elem_size` bytes (1, 2, 4 or 8) from `in` into `out` (the same
  // pointer for in place) with `fn`. `count` must fit in an int (the template's count). Throws Gloo's
  // exceptions; the cache is then emptied (a failed run leaves its buffers in an unknown state).
  void Allreduce(const void* in, void* out, std::size_t elem_size, std::size_t count, ReduceFunction fn);

  std::size_t entries() const { return lru_.size(); }
  std::uint64_t builds() const { return builds_; }  // template instances built so far

  struct Entry;  // defined in the .cc (one per template instance)

 private:
  Entry& Find(std::size_t elem_size, std::size_t count);

  std::shared_ptr<::gloo::Context> context_;
  std::size_t max_entries_, max_bytes_;
  std::size_t bytes_ = 0;
  std::uint64_t builds_ = 0;
  std::list<std::unique_ptr<Entry>> lru_;  // most recently used first; a handful of entries
};

}  // namespace commkit::comm::gloo
