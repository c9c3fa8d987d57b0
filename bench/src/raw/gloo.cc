// Raw Gloo baseline: every commkit-bench collective called on Gloo directly, on a context of its own
// connected through the job's store (under a "raw-gloo/" prefix): gloo::allreduce (RING), allgather,
// broadcast, reduce, alltoall, unbound-buffer send/recv for the sendrecv ring, and the old
// ReduceScatterHalvingDoubling for reduce_scatter (Gloo has no other reduce-scatter; at a
// non-power-of-two rank count it splits the ranks into power-of-two "binary blocks", the smaller
// blocks handing their data to the larger, so every rank count works).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "commkit/comm/prefix_store.h"
#include "commkit/common/strings.h"
#include "raw/raw.h"

namespace commkit::bench::raw {
namespace {

using std::chrono::milliseconds;

class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<commkit::Store> store, milliseconds timeout) : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->Set(key, std::string_view(data.data(), data.size()));
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(key, timeout_);
    if (!v.ok()) throw gloo::IoException(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    Status s = store_->Wait(keys, timeout);
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }

 private:
  std::shared_ptr<commkit::Store> store_;
  milliseconds timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);

template <typename T>
Result<ReduceFn> GlooFn(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceKind::kProd: return static_cast<ReduceFn>(&gloo::product<T>);
    case ReduceKind::kMin: return static_cast<ReduceFn>(&gloo::min<T>);
    case ReduceKind::kMax: return static_cast<ReduceFn>(&gloo::max<T>);
    default: break;
  }
  return Status::NotSupported(StrCat("commkit-bench: --raw gloo has no ", ToString(k), " reduction"));
}

// Gloo's old in-place reduce-scatter needs its reduction as a ReductionFunction.
template <typename T>
const gloo::ReductionFunction<T>* OldStyleFn(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return gloo::ReductionFunction<T>::sum;
    case ReduceKind::kProd: return gloo::ReductionFunction<T>::product;
    case ReduceKind::kMin: return gloo::ReductionFunction<T>::min;
    case ReduceKind::kMax: return gloo::ReductionFunction<T>::max;
    default: return nullptr;
  }
}

// Point-to-point slots of the sendrecv ring, apart from the collectives' tags.
constexpr std::uint64_t kSendRecvSlot = 0xB0ull << 56;

// One collective on T elements, called on Gloo directly. Each call is what a user of Gloo would write
// for the collective; in-place layouts follow commkit-bench's (allgather: send is this rank's block of
// recv; reduce_scatter: recv is this rank's block of send).
template <typename T>
class GlooRunner {
 public:
  GlooRunner(std::shared_ptr<gloo::Context> ctx, BenchCollective coll, ReduceFn fn, ReduceKind kind, int root,
             milliseconds timeout)
      : ctx_(std::move(ctx)), coll_(coll), fn_(fn), kind_(kind), root_(root), timeout_(timeout) {}

  Status operator()(const void* send_v, void* recv_v, const BufferCounts& c) {
    T* send = const_cast<T*>(static_cast<const T*>(send_v));
    T* recv = static_cast<T*>(recv_v);
    const int rank = ctx_->rank, p = ctx_->size;
    // Nothing to move (a size smaller than one element per rank): Gloo divides by the element count
    // in some collectives (allgather with 4 ranks at 8 B died of SIGFPE), and commkit's own backends
    // return at once there too.
    if (c.count == 0) return Status::Ok();
    try {
      switch (coll_) {
        case BenchCollective::kAllreduce: {
          gloo::AllreduceOptions o(ctx_);
          o.setTimeout(timeout_);
          o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          if (send != recv) o.setInput(send, c.count);
          o.setOutput(recv, c.count);
          o.setReduceFunction(gloo::AllreduceOptions::Func(fn_));
          gloo::allreduce(o);
          return Status::Ok();
        }
        case BenchCollective::kAllgather: {
          // Gloo's allgather reads its input while writing the output: an in-place input is copied.
          if (send == recv + c.count * static_cast<std::size_t>(rank)) {
            scratch_.assign(send, send + c.count);
            send = scratch_.data();
          }
          gloo::AllgatherOptions o(ctx_);
          o.setTimeout(timeout_);
          o.setInput(send, c.count);
          o.setOutput(recv, c.count * static_cast<std::size_t>(p));
          gloo::allgather(o);
          return Status::Ok();
        }
        case BenchCollective::kReduceScatter: return ReduceScatter(send, recv, c);
        case BenchCollective::kBroadcast: {
          gloo::BroadcastOptions o(ctx_);
          o.setTimeout(timeout_);
          o.setRoot(root_);
          if (rank == root_ && send != recv) o.setInput(send, c.count);
          o.setOutput(recv, c.count);
          gloo::broadcast(o);
          return Status::Ok();
        }
        case BenchCollective::kReduce: {
          gloo::ReduceOptions o(ctx_);
          o.setTimeout(timeout_);
          o.setRoot(root_);
          if (send != recv) o.setInput(send, c.count);
          o.setOutput(recv, c.count);
          o.setReduceFunction(gloo::ReduceOptions::Func(fn_));
          gloo::reduce(o);
          return Status::Ok();
        }
        case BenchCollective::kAlltoall: {
          gloo::AlltoallOptions o(ctx_);
          o.setTimeout(timeout_);
          o.setInput(send, c.count * static_cast<std::size_t>(p));
          o.setOutput(recv, c.count * static_cast<std::size_t>(p));
          gloo::alltoall(o);
          return Status::Ok();
        }
        case BenchCollective::kSendRecv: {
          auto out = ctx_->createUnboundBuffer(send, c.count * sizeof(T));
          auto in = ctx_->createUnboundBuffer(recv, c.count * sizeof(T));
          in->recv((rank - 1 + p) % p, kSendRecvSlot);
          out->send((rank + 1) % p, kSendRecvSlot);
          in->waitRecv(timeout_);
          out->waitSend(timeout_);
          return Status::Ok();
        }
      }
    } catch (const std::exception& e) {
      return Status::BackendError(StrCat("commkit-bench: raw gloo ", ToString(coll_), " on rank ", rank, "/", p, ": ",
                                         e.what()));
    }
    return Status::Internal("commkit-bench: raw gloo: unknown collective");
  }

 private:
  // gloo::ReduceScatterHalvingDoubling: in place on a buffer of p*count elements, which leaves this
  // rank's reduced block at the start of the buffer (like MPI's in-place reduce-scatter; at 2 ranks it
  // also happens to stay at the rank's own offset, at 4 it does not), at any rank count (3, 5, 6, 7
  // checked by #wrong in every type and reduction). It allocates its pairs' buffers
  // when built, so one instance is kept per (buffer, count) like a Gloo user would.
  Status ReduceScatter(T* send, T* recv, const BufferCounts& c) {
    const int rank = ctx_->rank, p = ctx_->size;
    const std::size_t total = c.count * static_cast<std::size_t>(p);
    if (total > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return Status::InvalidArgument("commkit-bench: raw gloo reduce_scatter: more than INT_MAX elements");
    }
    const bool in_place = recv == send + c.count * static_cast<std::size_t>(rank);
    T* work = send;
    if (!in_place) {
      // Out of place: the input must survive, so reduce a copy (part of the call, as in commkit's gloo).
      work_copy_.assign(send, send + total);
      work = work_copy_.data();
    }
    if (rs_ == nullptr || rs_ptr_ != work || rs_count_ != c.count) {
      rs_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(
          ctx_, std::vector<T*>{work}, static_cast<int>(total), std::vector<int>(p, static_cast<int>(c.count)),
          OldStyleFn<T>(kind_));
      rs_ptr_ = work;
      rs_count_ = c.count;
    }
    rs_->run();
    if (recv != work) std::memmove(recv, work, c.count * sizeof(T));
    return Status::Ok();
  }

  std::shared_ptr<gloo::Context> ctx_;
  BenchCollective coll_;
  ReduceFn fn_;
  ReduceKind kind_;
  int root_;
  milliseconds timeout_;
  std::vector<T> scratch_, work_copy_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<T>> rs_;
  T* rs_ptr_ = nullptr;
  std::size_t rs_count_ = 0;
};

template <typename T>
Result<std::function<Status(const void*, void*, const BufferCounts&)>> Make(std::shared_ptr<gloo::Context> ctx,
                                                                           const BenchOptions& o, milliseconds timeout) {
  ReduceFn fn = nullptr;
  if (Describe(o.collective).reduces) {
    COMMKIT_ASSIGN_OR_RETURN(fn, GlooFn<T>(o.op.kind));
  }
  // std::function needs a copyable callable: share the stateful runner.
  auto runner = std::make_shared<GlooRunner<T>>(std::move(ctx), o.collective, fn, o.op.kind, o.root, timeout);
  return std::function<Status(const void*, void*, const BufferCounts&)>(
      [runner](const void* s, void* r, const BufferCounts& c) { return (*runner)(s, r, c); });
}

}  // namespace

Result<std::unique_ptr<RawCollective>> MakeGloo(const BenchOptions& o, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store) {
  if (store == nullptr) return Status::Unavailable("commkit-bench: --raw gloo needs the job's store");
  const milliseconds timeout = std::chrono::seconds(o.timeout_s);
  std::shared_ptr<gloo::Context> ctx;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') attr.hostname = addr;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
    context->setTimeout(timeout);
    StoreAdapter adapter(std::make_shared<PrefixStore>("raw-gloo/", std::move(store)), timeout);
    context->connectFullMesh(adapter, device);
    ctx = context;
  } catch (const std::exception& e) {
    return Status::Unavailable(StrCat("commkit-bench: --raw gloo: connecting rank ", rank, "/", nranks, ": ", e.what()));
  }
  auto raw = std::make_unique<RawCollective>();
  raw->label = "raw-gloo";
  const bool reduces = Describe(o.collective).reduces;
  switch (o.dtype) {
    case DataType::kFloat32: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<float>(ctx, o, timeout));
      break;
    }
    case DataType::kFloat64: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<double>(ctx, o, timeout));
      break;
    }
    case DataType::kInt32: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<std::int32_t>(ctx, o, timeout));
      break;
    }
    case DataType::kInt64: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<std::int64_t>(ctx, o, timeout));
      break;
    }
    case DataType::kInt8: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<std::int8_t>(ctx, o, timeout));
      break;
    }
    case DataType::kUInt8: {
      COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<std::uint8_t>(ctx, o, timeout));
      break;
    }
    default:
      if (reduces) {
        return Status::NotSupported(StrCat("commkit-bench: --raw gloo: ", ToString(o.collective), " of ",
                                           ToString(o.dtype), " is not covered (f32, f64, int8, uint8, int32, int64)"));
      }
      {
        // Data movement only: any 2-byte type moves like uint16.
        COMMKIT_ASSIGN_OR_RETURN(raw->run, Make<std::uint16_t>(ctx, o, timeout));
      }
  }
  return raw;
}

}  // namespace commkit::bench::raw
