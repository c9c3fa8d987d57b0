#include "gloo_hd_cache.h"

#include <cstring>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/reduce_scatter.h>
#include <numeric>

#include "commkit/common/log.h"

namespace commkit::comm::gloo {

namespace {

// The templates take their reduction as a plain function pointer, fixed at build; commkit's reductions
// are chosen per call (dtype x op). The templates run the reduction on the calling thread inside
// run(), so the call's function is handed over in a thread-local for the duration of run().
thread_local ReduceFunction tls_reduce = nullptr;

template <typename T>
void ReduceTrampoline(T* x, const T* y, size_t n) {
  tls_reduce(x, x, y, n);
}

}  // namespace

struct HalvingDoublingCache::Entry {
  Entry(Kind k, std::size_t e, std::vector<std::size_t> c, std::size_t b)
      : kind(k), elem_size(e), counts(std::move(c)), bytes(b) {}
  virtual ~Entry() noexcept(false) = default;  // Gloo's Algorithm destructor may throw
  virtual void* data() = 0;
  virtual void Run() = 0;

  const Kind kind;
  const std::size_t elem_size;
  const std::vector<std::size_t> counts;  // all-reduce: {count}; reduce-scatter: per rank
  const std::size_t bytes;                // about what the entry and its template hold
};

namespace {

template <typename T, typename Algorithm>
struct TypedEntry final : HalvingDoublingCache::Entry {
  template <typename... Extra>
  TypedEntry(HalvingDoublingCache::Kind k, std::vector<std::size_t> c, std::size_t total, std::size_t copies,
             const std::shared_ptr<::gloo::Context>& context, Extra&&... extra)
      : Entry(k, sizeof(T), std::move(c), copies * total * sizeof(T)),
        buf(total),
        reduce(::gloo::CUSTOM, &ReduceTrampoline<T>),
        algo(context, std::vector<T*>{buf.data()}, static_cast<int>(total), std::forward<Extra>(extra)..., &reduce) {}
  void* data() override { return buf.data(); }
  void Run() override { algo.run(); }

  std::vector<T> buf;
  ::gloo::ReductionFunction<T> reduce;
  Algorithm algo;  // last: it keeps pointers to `buf` and `reduce`
};

template <typename T>
std::unique_ptr<HalvingDoublingCache::Entry> Build(HalvingDoublingCache::Kind kind, const std::vector<std::size_t>& counts,
                                                   const std::shared_ptr<::gloo::Context>& context) {
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (kind == HalvingDoublingCache::Kind::kAllreduce)  // the entry's buffer and the template's receive buffer
    return std::make_unique<TypedEntry<T, ::gloo::AllreduceHalvingDoubling<T>>>(kind, counts, total, 2, context);
  std::vector<int> elems(counts.begin(), counts.end());
  // The entry's buffer, the template's receive buffer and its distribution buffer.
  return std::make_unique<TypedEntry<T, ::gloo::ReduceScatterHalvingDoubling<T>>>(kind, counts, total, 3, context,
                                                                                  std::move(elems));
}

}  // namespace

HalvingDoublingCache::HalvingDoublingCache(std::shared_ptr<::gloo::Context> context, std::size_t max_entries,
                                           std::size_t max_bytes)
    : context_(std::move(context)), max_entries_(max_entries < 1 ? 1 : max_entries), max_bytes_(max_bytes) {}

HalvingDoublingCache::~HalvingDoublingCache() = default;

HalvingDoublingCache::Entry& HalvingDoublingCache::Find(Kind kind, std::size_t elem_size,
                                                        const std::vector<std::size_t>& counts) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if ((*it)->kind == kind && (*it)->elem_size == elem_size && (*it)->counts == counts) {
      if (it != lru_.begin()) lru_.splice(lru_.begin(), lru_, it);
      return *lru_.front();
    }
  }
  const bool rs = kind == Kind::kReduceScatter;
  std::unique_ptr<Entry> e;
  switch (elem_size) {
    case 1: e = Build<std::uint8_t>(kind, counts, context_); break;
    case 2: e = Build<std::uint16_t>(kind, counts, context_); break;
    case 4: e = Build<std::uint32_t>(kind, counts, context_); break;
    default: e = Build<std::uint64_t>(kind, counts, context_); break;
  }
  ++builds_;
  bytes_ += e->bytes;
  lru_.push_front(std::move(e));
  // Oldest first; never the entry just built. Every rank sees the same calls, so evicts the same.
  while (lru_.size() > 1 && (lru_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back()->bytes;
    lru_.pop_back();
  }
  // One line per build: a steady run builds each shape once (tests count these lines).
  COMMKIT_LOG_DEBUG("gloo halving-doubling: built the ", rs ? "reduce-scatter" : "all-reduce", " template for ",
                    std::accumulate(counts.begin(), counts.end(), std::size_t{0}), " elements of ", elem_size,
                    " bytes (", lru_.size(), " shapes kept, at most ", max_entries_, ")");
  return *lru_.front();
}

void HalvingDoublingCache::Run(Kind kind, const void* in, void* out, std::size_t elem_size,
                               const std::vector<std::size_t>& counts, ReduceFunction fn) {
  try {
    Entry& e = Find(kind, elem_size, counts);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::memcpy(e.data(), in, elem_size * total);
    tls_reduce = fn;
    e.Run();
    tls_reduce = nullptr;
    // The reduce-scatter template leaves this rank's block at the start of its buffer.
    const std::size_t out_count = kind == Kind::kAllreduce ? total : counts[static_cast<std::size_t>(context_->rank)];
    std::memcpy(out, e.data(), elem_size * out_count);
  } catch (...) {
    tls_reduce = nullptr;
    lru_.clear();
    bytes_ = 0;
    throw;
  }
}

void HalvingDoublingCache::Allreduce(const void* in, void* out, std::size_t elem_size, std::size_t count,
                                     ReduceFunction fn) {
  if (count == 0) return;
  key_.assign(1, count);
  Run(Kind::kAllreduce, in, out, elem_size, key_, fn);
}

void HalvingDoublingCache::ReduceScatter(const void* in, void* out, std::size_t elem_size,
                                         const std::vector<std::size_t>& counts, ReduceFunction fn) {
  Run(Kind::kReduceScatter, in, out, elem_size, counts, fn);
}

}  // namespace commkit::comm::gloo
