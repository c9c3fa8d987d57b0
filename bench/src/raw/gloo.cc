// Raw Gloo baseline: gloo::allreduce (RING, out-of-place) on a context of its own, connected through
// the job's store (under a "raw-gloo/" prefix). Allreduce only: the baseline for the wrapper overhead.
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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
Result<gloo::AllreduceOptions::Func> GlooFn(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return gloo::AllreduceOptions::Func(static_cast<ReduceFn>(&gloo::sum<T>));
    case ReduceKind::kProd: return gloo::AllreduceOptions::Func(static_cast<ReduceFn>(&gloo::product<T>));
    case ReduceKind::kMin: return gloo::AllreduceOptions::Func(static_cast<ReduceFn>(&gloo::min<T>));
    case ReduceKind::kMax: return gloo::AllreduceOptions::Func(static_cast<ReduceFn>(&gloo::max<T>));
    default: break;
  }
  return Status::NotSupported(StrCat("commkit-bench: --raw gloo has no ", ToString(k), " reduction"));
}

template <typename T>
std::function<Status(const void*, void*, const BufferCounts&)> Runner(std::shared_ptr<gloo::Context> ctx,
                                                                       gloo::AllreduceOptions::Func fn,
                                                                       milliseconds timeout) {
  return [ctx, fn, timeout](const void* send, void* recv, const BufferCounts& c) -> Status {
    try {
      gloo::AllreduceOptions opts(ctx);
      opts.setTimeout(timeout);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if (send != recv) opts.setInput(const_cast<T*>(static_cast<const T*>(send)), c.count);
      opts.setOutput(static_cast<T*>(recv), c.count);
      opts.setReduceFunction(fn);
      gloo::allreduce(opts);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::BackendError(StrCat("commkit-bench: raw gloo allreduce: ", e.what()));
    }
  };
}

}  // namespace

Result<std::unique_ptr<RawCollective>> MakeGloo(const BenchOptions& o, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store) {
  if (o.collective != BenchCollective::kAllreduce) {
    return Status::NotSupported("commkit-bench: --raw gloo covers allreduce only");
  }
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
  switch (o.dtype) {
    case DataType::kFloat32: {
      COMMKIT_ASSIGN_OR_RETURN(auto fn, GlooFn<float>(o.op.kind));
      raw->run = Runner<float>(ctx, fn, timeout);
      break;
    }
    case DataType::kFloat64: {
      COMMKIT_ASSIGN_OR_RETURN(auto fn, GlooFn<double>(o.op.kind));
      raw->run = Runner<double>(ctx, fn, timeout);
      break;
    }
    case DataType::kInt32: {
      COMMKIT_ASSIGN_OR_RETURN(auto fn, GlooFn<std::int32_t>(o.op.kind));
      raw->run = Runner<std::int32_t>(ctx, fn, timeout);
      break;
    }
    case DataType::kInt64: {
      COMMKIT_ASSIGN_OR_RETURN(auto fn, GlooFn<std::int64_t>(o.op.kind));
      raw->run = Runner<std::int64_t>(ctx, fn, timeout);
      break;
    }
    default:
      return Status::NotSupported(StrCat("commkit-bench: --raw gloo: type ", ToString(o.dtype),
                                         " not covered (f32, f64, int32, int64)"));
  }
  return raw;
}

}  // namespace commkit::bench::raw
