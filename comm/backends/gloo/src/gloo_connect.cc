// Connecting the gloo backend: Gloo's rendezvous over the group's store, the interface or address
// to listen on, and priming every pair's socket buffers.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <thread>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "commkit/comm/gloo/gloo_backend.h"
#include "commkit/comm/registry.h"
#include "commkit/common/cpu_cache.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/shm_segment.h"
#include "commkit/common/strings.h"
#include "gloo_internal.h"

namespace commkit::comm::gloo {

namespace {

using std::chrono::milliseconds;

// Adapts a commkit Store to Gloo's rendezvous store (Gloo expects exceptions).
class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  // `prefix` separates the keys of several Gloo contexts connected over one store.
  GlooStore(std::shared_ptr<commkit::Store> store, milliseconds timeout, std::string prefix = "")
      : store_(std::move(store)), timeout_(timeout), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->Set(prefix_ + key, std::string_view(data.data(), data.size()));
    if (!s.ok()) throw ::gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(prefix_ + key, timeout_);
    if (!v.ok()) throw ::gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    Status s = store_->Wait(prefixed, timeout);
    if (!s.ok()) throw ::gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + s.ToString());
  }

 private:
  std::shared_ptr<commkit::Store> store_;
  milliseconds timeout_;
  std::string prefix_;
};

// The local address used to reach `host` (no packet is sent: a UDP connect only picks the route).
std::string LocalAddressTowards(const std::string& host) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      void* addr = local.ss_family == AF_INET6 ? static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                                               : static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// The interfaces of this host with an IPv4 or IPv6 address (what Gloo's tcp device can bind), sorted,
// without duplicates.
std::vector<std::string> InterfacesWithAddresses() {
  std::vector<std::string> names;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return names;
  for (struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr || i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    names.emplace_back(i->ifa_name);
  }
  ::freeifaddrs(list);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// net.core.wmem_max, the ceiling of a socket's SO_SNDBUF (0 when unreadable).
std::int64_t WmemMax() {
  std::int64_t v = 0;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    long long x = 0;
    if (std::fscanf(f, "%lld", &x) == 1 && x > 0) v = x;
    std::fclose(f);
  }
  return v;
}

// How the ranks spread over machines (machines told apart as the shared-memory domain: hostname, boot
// id and namespaces), from one exchange through the group's store.
struct NodeSpread {
  int ranks_here = 1;      // ranks on this rank's machine, itself included
  int ranks_per_node = 1;  // the most on any machine
  int nodes = 1;
};

Result<NodeSpread> ExchangeNodes(const BackendContext& ctx) {
  NodeSpread spread;
  if (ctx.size < 2) return spread;
  const std::string mine = shm::ShmDomain();
  COMMKIT_RETURN_IF_ERROR(ctx.store->Set(StrCat("gloo/node/", ctx.rank), mine));
  std::vector<std::string> keys;
  for (int q = 0; q < ctx.size; ++q) keys.push_back(StrCat("gloo/node/", q));
  auto domains = ctx.store->MultiGet(keys, ctx.timeout);
  if (!domains.ok()) return domains.status();
  std::map<std::string, int> count;
  for (const auto& d : *domains) ++count[d];
  spread.ranks_here = count[mine];
  spread.nodes = static_cast<int>(count.size());
  for (const auto& [domain, n] : count) spread.ranks_per_node = std::max(spread.ranks_per_node, n);
  return spread;
}

// The largest all-reduce the halving-doubling mesh may run with its pairs in Gloo's synchronous
// busy-poll mode, or 0 to leave them in the event-loop mode. Why: in the event-loop mode every message
// is read by Gloo's device thread and handed to the caller through a condition variable, and that hand-
// off cost 400-600 us per 8 B all-reduce at 2 ranks here; reading on the caller's thread with
// MSG_DONTWAIT took 55-80 us (docs/gloo-algorithms.md). The price is that a waiting rank spins on its
// core, which delays every other thread that needs one: with 2 ranks on 2 cores, the ranks' own
// event-loop threads (the main mesh's ring, bcube and every other collective) ran 1.3-10x slower next
// to a spinner. So it is used by default only where this machine has two cores per rank (its caller
// and its Gloo event-loop thread); COMMKIT_GLOO_BUSY_POLL=on forces it, =off never. In that mode sends
// are blocking writes: two partners that send to each other at once both finish only if each message
// fits in the socket buffers without the peer reading. Gloo sizes
// SO_SNDBUF up to the message before each write, so the ceiling is net.core.wmem_max (doubled by the
// kernel for its bookkeeping); half of that is the largest message allowed (here 32 MiB messages
// stalled with a 4 MiB ceiling, 8 MiB did not), and a halving-doubling message is at most half the
// buffer at a power-of-two rank count (ranks outside the power-of-two block send all of it). The mode
// cannot be switched back, so it is used only where the built-in and topology rules keep
// halving-doubling under that size; larger
// calls that COMMKIT_TUNE or a calibration send to halving-doubling run as ring (AlgorithmFor). The
// calibration's own halving-doubling timings then come from the mode the runs use.
// `wmem_max`: net.core.wmem_max (WmemMax); `who` starts every log line.
std::size_t HdBusyPollLimit(const BackendContext& ctx, const std::optional<std::string>& mode, const NodeSpread& spread,
                            const tune::Table& table, std::int64_t wmem_max, const std::string& who) {
  if (mode == "off") return 0;
  const unsigned cores = std::thread::hardware_concurrency();
  if (mode != "on" && (cores == 0 || 2 * static_cast<unsigned>(spread.ranks_here) > cores)) return 0;
  const auto wmem = static_cast<std::size_t>(std::max<std::int64_t>(wmem_max, 0));
  const bool pow2 = (ctx.size & (ctx.size - 1)) == 0;
  const std::size_t limit = pow2 ? wmem : wmem / 2;
  if (limit == 0) return 0;
  for (const tune::Rule& r : table.rules()) {
    if (r.collective != CollectiveKind::kAllreduce || r.algorithm != CollectiveAlgorithm::kHalvingDoubling ||
        r.max_bytes <= limit + 1)
      continue;
    if (r.source == tune::Source::kDefault || r.source == tune::Source::kTopology) {
      COMMKIT_LOG_INFO(who, ": halving-doubling stays in Gloo's event-loop mode: ", r.why, " runs it above the ", limit,
                       " bytes that fit the socket buffers in busy-poll mode (raise net.core.wmem_max)");
      return 0;
    }
    COMMKIT_LOG_INFO(who, ": ", r.why, " asks for halving-doubling above ", limit,
                     " bytes; those calls run as ring (busy-poll mode; COMMKIT_GLOO_BUSY_POLL=off keeps them)");
  }
  return limit;
}

// Gloo's tcp pair sets SO_SNDBUF to the largest message it has written so far; a later message just
// under twice that size then waits on delayed ACKs (70-105 ms per call, see platform-notes). Writing
// one message of at least net.core.wmem_max on every pair at connect fixes the buffer at its ceiling
// so no later size can hit the stall. COMMKIT_GLOO_PRIME_BYTES overrides the size (0 disables).
std::int64_t DefaultPrimeBytes(std::int64_t wmem_max) {
  return std::min<std::int64_t>(wmem_max > 0 ? wmem_max : 4 << 20, 64 << 20);
}

// Every rank sends `bytes` to and receives `bytes` from every peer (sends posted first, so no order
// between peers is needed). Throws gloo exceptions on failure or timeout.
void PrimePairs(::gloo::rendezvous::Context& context, std::size_t bytes, std::chrono::milliseconds timeout) {
  const int rank = context.rank, size = context.size;
  if (bytes == 0 || size < 2) return;
  constexpr std::uint64_t kPrimeSlot = 0xC1ull << 56;
  std::vector<char> out(bytes, 0);
  auto send = context.createUnboundBuffer(out.data(), out.size());
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) send->send(peer, kPrimeSlot);
  }
  // Receives in batches so a large world needs at most kBatch buffers of `bytes`.
  constexpr int kBatch = 8;
  std::vector<std::vector<char>> in(static_cast<std::size_t>(std::min(kBatch, size)), std::vector<char>(bytes));
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> recvs;
  for (int first = 0; first < size; first += kBatch) {
    recvs.clear();
    for (int peer = first; peer < std::min(size, first + kBatch); ++peer) {
      if (peer == rank) continue;
      recvs.push_back(context.createUnboundBuffer(in[peer - first].data(), bytes));
      recvs.back()->recv(peer, kPrimeSlot);
    }
    for (auto& r : recvs) r->waitRecv(timeout);
  }
  for (int i = 0; i < size - 1; ++i) send->waitSend(timeout);
}

// The same for the halving-doubling mesh, whose all-reduce template uses Gloo's old-style buffers: only
// their sends grow a pair's SO_SNDBUF (unbound buffers never do), so PrimePairs leaves those sockets at
// the first message's size, and every new size just under twice the last waits on delayed ACKs (5-60 ms
// at 8, 32 and 128 KiB, measured in docs/benchmarks.md). One old-style exchange of `bytes` per pair fixes
// the buffer at its ceiling. Step k sends to rank+k and receives from rank-k, so every rank pairs up
// with the same partner at each step and holds two buffers of `bytes` at a time. Throws like Gloo.
void PrimeOldStylePairs(::gloo::rendezvous::Context& context, std::size_t bytes) {
  const int rank = context.rank, size = context.size;
  if (bytes == 0 || size < 2) return;
  const int slot = context.nextSlot();  // every rank draws the same slot
  std::vector<char> out(bytes, 0), in(bytes);
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size, from = (rank - k + size) % size;
    auto recv = context.getPair(from)->createRecvBuffer(slot, in.data(), in.size());
    auto send = context.getPair(to)->createSendBuffer(slot, out.data(), out.size());
    send->send();
    recv->waitRecv();
    send->waitSend();
  }
}

// A group on one node meets in shared memory before every collective (gloo_backend.cc: Meet). Where
// that is unavailable (no room in /dev/shm, ranks in different IPC namespaces) the process group
// checks for mismatched calls itself, with an all-reduce of its own per collective.
std::unique_ptr<SlotMeeting> ConnectMeeting(const BackendContext& ctx, const std::string& who) {
  ShmTransportOptions options;
  options.slot_bytes = SlotMeeting::SlotBytesFor(ctx.size);  // small collectives travel here (kFlat)
  options.ring_bytes = 0;   // send/recv go over Gloo
  options.label = "gloo backend";
  options.rotate_from = RotateFromFor(ThisCpuVendor());
  // After a Gloo call a rank that arrives first sleeps on the futex at once instead of spinning or
  // yielding: ring all-reduces (unbound buffers on the event-loop threads) then took 4 ms per call from
  // 16 B to 1 MiB at 2 ranks, against 150-400 us without spinning (docs/gloo-algorithms.md). A Gloo
  // call costs 100 us and more here, so the futex wake-up (tens of us) is the smaller price. After a
  // call that stayed in shared memory the backend lets it spin (GlooBackend::Run).
  options.busy_wait = false;
  auto t = ShmTransport::Connect(ctx.rank, ctx.size, ctx.group_name, StoreExchange(ctx, "gloo/shm/"), options);
  if (!t.ok()) {
    COMMKIT_LOG_WARN(who, ": no shared-memory meeting (", t.status().message(),
                     "); mismatched calls are checked with one more all-reduce per collective");
    return nullptr;
  }
  return SlotMeeting::Create(std::move(t).value(), StoreExchange(ctx, "gloo/shm/"), who, "Gloo");
}

}  // namespace

Result<std::unique_ptr<Backend>> CreateGlooBackend(const BackendContext& ctx) {
  ::gloo::transport::tcp::attr attr;
  std::optional<std::string> iface;
  const char* iface_var = "COMMKIT_SOCKET_IFNAME";
  COMMKIT_ASSIGN_OR_RETURN(iface, EnvString(iface_var));
  if (!iface) {
    iface_var = "GLOO_SOCKET_IFNAME";
    COMMKIT_ASSIGN_OR_RETURN(iface, EnvString(iface_var));
  }
  std::string where;
  if (iface && !iface->empty()) {
    // Gloo's own error for this is "Unable to find address for: <name>"; say which variable chose it,
    // what this host has, and what to do.
    std::vector<std::string> names = InterfacesWithAddresses();
    if (std::find(names.begin(), names.end(), *iface) == names.end())
      return Status::InvalidArgument(
          StrCat("gloo backend, rank ", ctx.rank, "/", ctx.size, " of ", ctx.group_name, ": ", iface_var, "=", *iface,
                 ": this host has no network interface '", *iface, "' with an IP address (interfaces with one: ",
                 names.empty() ? std::string("none") : Join(names, ", "), "); set ", iface_var,
                 " to an interface every rank can reach, or unset it to use the address that routes to MASTER_ADDR"));
    attr.iface = *iface;
    where = StrCat("interface ", *iface);
  } else {
    std::string master = EnvRaw("MASTER_ADDR").value_or("127.0.0.1");
    std::string local = LocalAddressTowards(master);
    attr.hostname = local.empty() ? "127.0.0.1" : local;
    where = StrCat("address ", attr.hostname, " (routes to MASTER_ADDR ", master, ")");
  }
  const std::int64_t wmem_max = WmemMax();
  std::int64_t prime_bytes = 0;
  COMMKIT_ASSIGN_OR_RETURN(prime_bytes,
                           EnvIntOr("COMMKIT_GLOO_PRIME_BYTES", DefaultPrimeBytes(wmem_max), 0, 1ll << 30));
  std::optional<std::string> busy_poll;
  COMMKIT_ASSIGN_OR_RETURN(busy_poll, EnvChoice("COMMKIT_GLOO_BUSY_POLL", {"auto", "on", "off"}));
  std::string who = StrCat("gloo backend, rank ", ctx.rank, "/", ctx.size, " of ", ctx.group_name);
  auto spread = ExchangeNodes(ctx);
  if (!spread.ok()) return spread.status().WithContext(StrCat(who, ": telling which ranks share a machine"));
  auto table = tune::Table::ForBackend("gloo", ctx, {ctx.size, spread->ranks_per_node, spread->nodes});
  if (!table.ok()) return table.status().WithContext(who);
  std::unique_ptr<SlotMeeting> meeting;
  if (ctx.size > 1 && spread->nodes == 1) meeting = ConnectMeeting(ctx, who);
  try {
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(ctx.timeout);
    GlooStore store(ctx.store, ctx.timeout);
    context->connectFullMesh(store, device);
    PrimePairs(*context, static_cast<std::size_t>(prime_bytes), ctx.timeout);
    std::shared_ptr<::gloo::rendezvous::Context> hd_context;
    std::size_t hd_busy_max_bytes = 0;
    const bool uses_hd = table->Uses(CollectiveKind::kAllreduce, CollectiveAlgorithm::kHalvingDoubling);
    if (ctx.size > 1 && uses_hd) {
      hd_context = std::make_shared<::gloo::rendezvous::Context>(ctx.rank, ctx.size);
      hd_context->setTimeout(ctx.timeout);
      GlooStore hd_store(ctx.store, ctx.timeout, "hd/");
      hd_context->connectFullMesh(hd_store, device);
      PrimePairs(*hd_context, static_cast<std::size_t>(prime_bytes), ctx.timeout);
      PrimeOldStylePairs(*hd_context, static_cast<std::size_t>(prime_bytes));
      hd_busy_max_bytes = HdBusyPollLimit(ctx, busy_poll, *spread, *table, wmem_max, who);
      if (hd_busy_max_bytes > 0) {
        for (int peer = 0; peer < ctx.size; ++peer)
          if (peer != ctx.rank) hd_context->getPair(peer)->setSync(true, /*busyPoll=*/true);
      }
    }
    COMMKIT_LOG_INFO(who, ": connected full mesh on ", where, ", pairs primed with ", prime_bytes,
                     " bytes, all-reduce: ", tune::Describe(*table, CollectiveKind::kAllreduce, MemoryKind::kHost),
                     hd_busy_max_bytes > 0 ? StrCat(", halving-doubling busy-polls up to ", hd_busy_max_bytes, " bytes")
                                           : std::string());
    return MakeGlooBackend(context, hd_context, device, ctx.rank, ctx.size, std::move(*table), ctx.timeout,
                           hd_busy_max_bytes, std::move(meeting));
  } catch (const std::exception& e) {
    return FromGloo(e, "connect")
        .WithContext(StrCat(who, " on ", where, " (set COMMKIT_SOCKET_IFNAME to an interface every rank can reach)"));
  }
}

BackendInfo GlooBackendInfo() {
  BackendInfo info;
  info.name = "gloo";
  info.memory = MemoryKind::kHost;
  info.available = true;
  info.create = &CreateGlooBackend;
  return info;
}

}  // namespace commkit::comm::gloo

extern "C" __attribute__((visibility("default"))) void commkit_register_gloo_backend(commkit::Registry* registry) {
  registry->Register(commkit::comm::gloo::GlooBackendInfo());
}
