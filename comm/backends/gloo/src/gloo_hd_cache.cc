#include "gloo_hd_cache.h"

#include <cstring>
#include <gloo/allreduce_halving_doubling.h>
#include <vector>

#include "commkit/common/log.h"

namespace commkit::comm::gloo {

namespace {

// The template takes its reduction as a plain function pointer, fixed at build; commkit's reductions
// are chosen per call (dtype x op). The template runs the reduction on the calling thread inside
// run(), so the call's function is handed over in a thread-local for the duration of run().
thread_local ReduceFunction tls_reduce = nullptr;

template <typename T>
void ReduceTrampoline(T* x, const T* y, size_t n) {
  tls_reduce(x, x, y, n);
}

}  // namespace

struct HalvingDoublingCache::Entry {
  Entry(std::size_t e, std::size_t n) : elem_size(e), count(n) {}
  virtual ~Entry() noexcept(false) = default;  // Gloo's Algorithm destructor may throw
  virtual void* data() = 0;
  virtual void Run() = 0;
  // The entry's own buffer and the template's receive buffer (about the same size).
  std::size_t Bytes() const { return 2 * elem_size * count; }

  const std::size_t elem_size, count;
};

namespace {

template <typename T>
struct TypedEntry final : HalvingDoublingCache::Entry {
  TypedEntry(const std::shared_ptr<::gloo::Context>& context, std::size_t n)
      : Entry(sizeof(T), n),
        buf(n),
        reduce(::gloo::CUSTOM, &ReduceTrampoline<T>),
        algo(context, std::vector<T*>{buf.data()}, static_cast<int>(n), &reduce) {}
  void* data() override { return buf.data(); }
  void Run() override { algo.run(); }

  std::vector<T> buf;
  ::gloo::ReductionFunction<T> reduce;
  ::gloo::AllreduceHalvingDoubling<T> algo;  // last: it keeps pointers to `buf` and `reduce`
};

}  // namespace

HalvingDoublingCache::HalvingDoublingCache(std::shared_ptr<::gloo::Context> context, std::size_t max_entries,
                                           std::size_t max_bytes)
    : context_(std::move(context)), max_entries_(max_entries < 1 ? 1 : max_entries), max_bytes_(max_bytes) {}

HalvingDoublingCache::~HalvingDoublingCache() = default;

HalvingDoublingCache::Entry& HalvingDoublingCache::Find(std::size_t elem_size, std::size_t count) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if ((*it)->elem_size == elem_size && (*it)->count == count) {
      if (it != lru_.begin()) lru_.splice(lru_.begin(), lru_, it);
      return *lru_.front();
    }
  }
  std::unique_ptr<Entry> e;
  switch (elem_size) {
    case 1: e = std::make_unique<TypedEntry<std::uint8_t>>(context_, count); break;
    case 2: e = std::make_unique<TypedEntry<std::uint16_t>>(context_, count); break;
    case 4: e = std::make_unique<TypedEntry<std::uint32_t>>(context_, count); break;
    default: e = std::make_unique<TypedEntry<std::uint64_t>>(context_, count); break;
  }
  ++builds_;
  bytes_ += e->Bytes();
  lru_.push_front(std::move(e));
  // Oldest first; never the entry just built. Every rank sees the same calls, so evicts the same.
  while (lru_.size() > 1 && (lru_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back()->Bytes();
    lru_.pop_back();
  }
  // One line per build: a steady run builds each shape once (tests count these lines).
  COMMKIT_LOG_DEBUG("gloo halving-doubling: built the template for ", count, " elements of ", elem_size, " bytes (",
                    lru_.size(), " shapes kept, at most ", max_entries_, ")");
  return *lru_.front();
}

void HalvingDoublingCache::Allreduce(const void* in, void* out, std::size_t elem_size, std::size_t count,
                                     ReduceFunction fn) {
  if (count == 0) return;
  try {
    Entry& e = Find(elem_size, count);
    const std::size_t bytes = elem_size * count;
    std::memcpy(e.data(), in, bytes);
    tls_reduce = fn;
    e.Run();
    tls_reduce = nullptr;
    std::memcpy(out, e.data(), bytes);
  } catch (...) {
    tls_reduce = nullptr;
    lru_.clear();
    bytes_ = 0;
    throw;
  }
}

}  // namespace commkit::comm::gloo
