#include "ucx_transport.h"

#include <sched.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "ucx_api.h"

namespace commkit::comm::host {

namespace {

using Clock = std::chrono::steady_clock;

std::string Hex(const void* data, std::size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    auto b = static_cast<const unsigned char*>(data)[i];
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool Unhex(const std::string& text, std::vector<unsigned char>& out) {
  if (text.size() % 2 != 0) return false;
  out.resize(text.size() / 2);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

// Tag layout: channel (4 bits) | source rank (20 bits) | sequence (24 bits) | step (16 bits).
constexpr int kRankBits = 20;
std::uint64_t MakeTag(int channel, int source, std::uint64_t sequence, std::uint32_t step) {
  return (static_cast<std::uint64_t>(channel & 0xF) << 60) |
         (static_cast<std::uint64_t>(source & ((1 << kRankBits) - 1)) << 40) | ((sequence & 0xFFFFFF) << 16) |
         (step & 0xFFFF);
}

}  // namespace

struct UcxTransport::Impl {
  int rank = 0, size = 1;
  std::string who;
  const UcxApi* api = nullptr;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;
  std::vector<std::atomic<int>> failed;  // ucs_status_t of a peer's endpoint error (0: fine)
  std::mutex mu;
  std::atomic<bool> aborted{false};
  std::mutex reason_mu;  // Abort() must not wait for a Run() that holds `mu`
  std::string abort_reason;
  std::string Reason() {
    std::lock_guard<std::mutex> lock(reason_mu);
    return abort_reason;
  }
  bool broken = false;  // a request could not be cancelled: buffers may still be referenced

  explicit Impl(int n) : eps(n, nullptr), failed(n) {}

  static void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<std::atomic<int>*>(arg)->store(static_cast<int>(status));
  }

  void CloseEndpoints() {
    std::vector<void*> pending;
    for (auto& ep : eps) {
      if (ep == nullptr) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = api->ep_close_nbx(ep, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) pending.push_back(r);
      ep = nullptr;
    }
    auto until = Clock::now() + std::chrono::seconds(2);
    for (void* r : pending) {
      while (api->request_check_status(r) == UCS_INPROGRESS && Clock::now() < until) api->worker_progress(worker);
      if (api->request_check_status(r) != UCS_INPROGRESS) api->request_free(r);
    }
  }

  ~Impl() {
    if (worker != nullptr) {
      CloseEndpoints();
      api->worker_destroy(worker);
    }
    if (context != nullptr) api->cleanup(context);
  }
};

UcxTransport::UcxTransport() = default;
UcxTransport::~UcxTransport() = default;
int UcxTransport::rank() const { return impl_->rank; }
int UcxTransport::size() const { return impl_->size; }

// This rank's UCX context, worker and worker address (hex), or why there is none.
Result<std::string> UcxTransport::StartWorker() {
  Impl& m = *impl_;
  auto api = LoadUcx();
  if (!api.ok()) return api.status();
  m.api = *api;
  // Read before UCX's configuration exists, so that a bad value leaves nothing to release.
  std::optional<std::string> iface;
  COMMKIT_ASSIGN_OR_RETURN(iface, EnvString("COMMKIT_SOCKET_IFNAME"));
  ucp_config_t* config = nullptr;
  ucs_status_t st = m.api->config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::BackendError(StrCat("ucp_config_read: ", m.api->status_string(st)));
  if (iface && !iface->empty() && !EnvRaw("UCX_NET_DEVICES")) m.api->config_modify(config, "NET_DEVICES", iface->c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  st = m.api->Init(&params, config, &m.context);
  m.api->config_release(config);
  if (st != UCS_OK)
    return Status::BackendError(StrCat("ucp_init: ", m.api->status_string(st),
                                       iface && !iface->empty() ? StrCat(" (UCX found no usable device for COMMKIT_SOCKET_IFNAME=",
                                                                         *iface, "; check the interface exists on this host)")
                                                                : std::string()));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // serialised by Impl::mu
  st = m.api->worker_create(m.context, &wp, &m.worker);
  if (st != UCS_OK) return Status::BackendError(StrCat("ucp_worker_create: ", m.api->status_string(st)));
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  st = m.api->worker_get_address(m.worker, &address, &length);
  if (st != UCS_OK) return Status::BackendError(StrCat("ucp_worker_get_address: ", m.api->status_string(st)));
  std::string mine = Hex(address, length);
  m.api->worker_release_address(m.worker, address);
  return mine;
}

Result<std::unique_ptr<UcxTransport>> UcxTransport::Connect(const BackendContext& ctx) {
  if (ctx.size >= (1 << kRankBits)) return Status::NotSupported("host backend: more than 2^20 ranks");
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  t->impl_ = std::make_unique<Impl>(ctx.size);
  Impl& m = *t->impl_;
  m.rank = ctx.rank;
  m.size = ctx.size;
  m.who = StrCat("host backend (UCX), rank ", ctx.rank, "/", ctx.size, " of ", ctx.group_name);
  // A rank that cannot start UCX (no libucp on its node, no usable device) still publishes, so that
  // the others stop at once with its reason instead of waiting for its address until the timeout. A
  // missing library is Unavailable on every rank alike, so that "auto" moves every rank on to the same
  // next backend (registry.cc).
  constexpr std::string_view kUnavailable = "unavailable:", kFailed = "failed:";
  Result<std::string> mine = t->StartWorker();
  const std::string_view marker = mine.ok() ? "" : mine.status().code() == StatusCode::kUnavailable ? kUnavailable : kFailed;
  COMMKIT_RETURN_IF_ERROR(ctx.store->Set(StrCat("ucx/addr/", ctx.rank),
                                         mine.ok() ? *mine : StrCat(marker, mine.status().message()))
                              .WithContext(m.who));
  if (!mine.ok()) return mine.status().WithContext(m.who);
  std::vector<std::string> keys;
  for (int q = 0; q < ctx.size; ++q) keys.push_back(StrCat("ucx/addr/", q));
  auto all = ctx.store->MultiGet(keys, ctx.timeout);
  if (!all.ok()) return all.status().WithContext(StrCat(m.who, ": waiting for every rank's UCX address"));
  for (int q = 0; q < ctx.size; ++q) {
    for (std::string_view prefix : {kUnavailable, kFailed}) {
      if (!StartsWith((*all)[q], prefix)) continue;
      std::string why = StrCat(m.who, ": rank ", q, " could not start UCX: ", (*all)[q].substr(prefix.size()));
      return prefix == kUnavailable ? Status::Unavailable(why) : Status::RemoteError(why);
    }
  }
  // Every rank reports whether it reached every peer, and no rank returns (and could tear its worker
  // down under a peer still connecting) before all have: they fail or succeed together.
  std::string connected = "ok";
  std::vector<unsigned char> bytes;
  for (int q = 0; q < ctx.size && connected == "ok"; ++q) {
    if (q == ctx.rank) continue;
    if (!Unhex((*all)[q], bytes) || bytes.empty()) {
      connected = StrCat("malformed UCX address of rank ", q);
      break;
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(bytes.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Impl::OnEndpointError;
    ep.err_handler.arg = &m.failed[q];
    ucs_status_t st = m.api->ep_create(m.worker, &ep, &m.eps[q]);
    if (st != UCS_OK) {
      m.eps[q] = nullptr;
      connected = StrCat("rank ", ctx.rank, " could not connect to rank ", q, ": ucp_ep_create: ", m.api->status_string(st),
                         " (set COMMKIT_SOCKET_IFNAME or UCX_NET_DEVICES to an interface every host reaches)");
    }
  }
  COMMKIT_RETURN_IF_ERROR(ctx.store->Set(StrCat("ucx/connected/", ctx.rank), connected).WithContext(m.who));
  keys.clear();
  for (int q = 0; q < ctx.size; ++q) keys.push_back(StrCat("ucx/connected/", q));
  auto outcome = ctx.store->MultiGet(keys, ctx.timeout);
  if (!outcome.ok()) return outcome.status().WithContext(StrCat(m.who, ": waiting for every rank to connect"));
  for (const auto& o : *outcome)
    if (o != "ok") return Status::BackendError(StrCat(m.who, ": ", o));
  return t;
}

Status UcxTransport::Run(std::vector<Op>& ops, int channel, std::uint64_t sequence, std::uint32_t step,
                         Deadline deadline) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.broken) return Status::Aborted(StrCat(m.who, ": unusable after an earlier failure"));
  struct Pending {
    void* request = nullptr;
    ucs_status_t status = UCS_INPROGRESS;
    ucp_tag_recv_info_t info{};
  };
  std::vector<Pending> pending(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    Pending& p = pending[i];
    if (op.bytes == 0) {  // both sides know the sizes: empty blocks are not sent at all
      p.status = UCS_OK;
      continue;
    }
    ucp_request_param_t param{};
    if (op.send) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
      param.datatype = ucp_dt_make_contig(1);
      void* r = m.api->tag_send_nbx(m.eps[op.peer], op.buf, op.bytes, MakeTag(channel, m.rank, sequence, step + op.step), &param);
      if (r == nullptr) p.status = UCS_OK;
      else if (UCS_PTR_IS_ERR(r)) p.status = UCS_PTR_STATUS(r);
      else p.request = r;
    } else {
      // Always a request (UCX 1.13 leaves recv_info unset on immediate completion): its test fills the
      // received length, so a short message is an error and not silent garbage.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      param.datatype = ucp_dt_make_contig(1);
      void* r = m.api->tag_recv_nbx(m.worker, op.out, op.bytes, MakeTag(channel, op.peer, sequence, step + op.step), ~0ull, &param);
      if (r == nullptr) {
        p.status = UCS_OK;
        op.received = p.info.length;
      } else if (UCS_PTR_IS_ERR(r)) {
        p.status = UCS_PTR_STATUS(r);
      } else {
        p.request = r;
      }
    }
  }
  std::size_t spins = 0;
  auto describe = [&](std::size_t i) {
    return StrCat(ops[i].send ? "send " : "receive ", ops[i].bytes, " bytes ", ops[i].send ? "to" : "from", " rank ",
                  ops[i].peer);
  };
  Status failure;
  while (true) {
    m.api->worker_progress(m.worker);
    bool all = true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      Pending& p = pending[i];
      if (p.request != nullptr) {
        ucs_status_t st = ops[i].send ? m.api->request_check_status(p.request) : m.api->tag_recv_request_test(p.request, &p.info);
        if (st == UCS_INPROGRESS) {
          all = false;
          continue;
        }
        p.status = st;
        if (!ops[i].send) ops[i].received = p.info.length;
        m.api->request_free(p.request);
        p.request = nullptr;
      }
      if (p.status != UCS_OK && failure.ok()) {
        std::string why = m.api->status_string(p.status);
        if (p.status == UCS_ERR_MESSAGE_TRUNCATED)
          why = StrCat("the peer sent more than ", ops[i].bytes, " bytes (counts differ between the ranks)");
        failure = Status::RemoteError(StrCat(m.who, ": ", describe(i), " failed: ", why));
      }
    }
    if (all) break;
    if ((++spins & 255) != 0) continue;
    auto now = Clock::now();
    std::string why;
    for (std::size_t i = 0; i < ops.size() && why.empty(); ++i)
      if (pending[i].request != nullptr && m.failed[ops[i].peer].load() != 0)
        why = StrCat(describe(i), " failed: the connection to rank ", ops[i].peer, " broke (",
                     m.api->status_string(static_cast<ucs_status_t>(m.failed[ops[i].peer].load())), "): the rank died or the network failed");
    if (why.empty() && m.aborted.load()) why = StrCat("aborted: ", m.Reason());
    if (why.empty() && now >= deadline) {
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (pending[i].request != nullptr) {
          why = StrCat("timed out waiting to ", describe(i));
          break;
        }
    }
    if (!why.empty()) {
      // Cancel what is still pending; requests that do not finish keep their buffers referenced, so
      // the transport becomes unusable rather than risk writing into freed memory later.
      for (auto& p : pending)
        if (p.request != nullptr) m.api->request_cancel(m.worker, p.request);
      auto until = Clock::now() + std::chrono::seconds(2);
      for (auto& p : pending) {
        while (p.request != nullptr && Clock::now() < until) {
          m.api->worker_progress(m.worker);
          if (m.api->request_check_status(p.request) != UCS_INPROGRESS) {
            m.api->request_free(p.request);
            p.request = nullptr;
          }
        }
        if (p.request != nullptr) m.broken = true;
      }
      if (now >= deadline && !m.aborted.load() && why.rfind("timed out", 0) == 0) return Status::Timeout(StrCat(m.who, ": ", why));
      if (m.aborted.load()) return Status::Aborted(StrCat(m.who, ": ", why));
      return Status::RemoteError(StrCat(m.who, ": ", why));
    }
    if (static_cast<unsigned>(m.size) > std::thread::hardware_concurrency()) sched_yield();
  }
  for (std::size_t i = 0; i < ops.size() && failure.ok(); ++i)
    if (!ops[i].send && ops[i].received != ops[i].bytes)
      failure = Status::RemoteError(StrCat(m.who, ": rank ", ops[i].peer, " sent ", ops[i].received, " bytes, expected ",
                                           ops[i].bytes, " (counts differ between the ranks)"));
  return failure;
}

void UcxTransport::Abort(std::string_view reason) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.reason_mu);
    if (m.aborted.load()) return;
    m.abort_reason = std::string(reason);
  }
  m.aborted.store(true);
}

}  // namespace commkit::comm::host
