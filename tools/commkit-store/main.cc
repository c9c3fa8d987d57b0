// commkit-store: run a standalone rendezvous store, poke at one, or check a job's rendezvous.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "commkit/common/config.h"
#include "commkit/comm/launch_env.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/common/env.h"
#include "commkit/common/host_port.h"
#include "commkit/common/strings.h"

namespace {

using namespace commkit;
using json = nlohmann::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// Exit codes: 0 ok, 1 operation failed (timeout, rejected...), 2 usage, 3 not found (get/check false).
constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr int kNotFound = 3;

int Fail(const Status& s) {
  std::fprintf(stderr, "commkit-store: %s\n", s.ToString().c_str());
  return s.code() == StatusCode::kInvalidArgument ? kUsage : kFailed;
}

struct ClientArgs {
  std::string addr = "127.0.0.1:29500";
  std::string token;
  double timeout_s = 30;
};

Result<std::unique_ptr<TcpStore>> Connect(const ClientArgs& a) {
  auto hp = ParseHostPort(a.addr);
  if (!hp.ok()) return hp.status().WithContext("--addr");
  TcpStoreOptions o;
  o.host = hp->host;
  o.port = hp->port;
  o.token = a.token;
  if (o.token.empty()) {
    if (const char* t = std::getenv("COMMKIT_STORE_TOKEN")) o.token = t;
  }
  o.timeout = std::chrono::milliseconds(static_cast<long long>(a.timeout_s * 1000));
  o.connect_timeout = o.timeout;
  return TcpStore::Create(o);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "commkit-store: the commkit rendezvous store.\n"
      "  serve       run a standalone TcpStore server until SIGINT/SIGTERM\n"
      "  set/get/add/check/wait/delete/num-keys   talk to a running store\n"
      "  rendezvous  join the job described by the launcher's environment and print who arrived\n"
      "              (e.g. `commkit-run -n 4 -- commkit-store rendezvous`)\n"
      "Exit codes: 0 success, 1 failure (timeout, rejected, unreachable), 2 usage error, 3 key absent.",
      "commkit-store"};
  app.require_subcommand(1);
  bool json_out = false;
  app.add_flag("--json", json_out, "Machine-readable output");

  // serve
  TcpStoreServerOptions serve_opts;
  serve_opts.port = 29500;
  auto* serve = app.add_subcommand("serve", "Run a standalone store server");
  serve->add_option("--host", serve_opts.host, "Address to bind (default 0.0.0.0)");
  serve->add_option("--port", serve_opts.port, "Port (0 = any free port)")->check(CLI::Range(0, 65535));
  serve->add_option("--token", serve_opts.token, "Job token clients must present (default: $COMMKIT_STORE_TOKEN)");
  double max_pending_mib = 256, frame_timeout_s = 30, idle_timeout_s = 900;
  serve->add_option("--max-pending-mib", max_pending_mib,
                    "Memory for requests still arriving, all clients together; reading pauses above it (default 256)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--frame-timeout", frame_timeout_s,
                    "Seconds a partly received request may stall before its connection is dropped (default 30)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--idle-timeout", idle_timeout_s,
                    "Seconds an idle client connection is kept (0 = forever; default 900)")
      ->check(CLI::NonNegativeNumber);

  ClientArgs ca;
  std::string key, value;
  std::vector<std::string> keys;
  std::int64_t delta = 1;
  auto client = [&](const char* name, const char* help) {
    auto* sc = app.add_subcommand(name, help);
    sc->add_option("--addr", ca.addr, "Store address HOST:PORT (default 127.0.0.1:29500)");
    sc->add_option("--token", ca.token, "Job token (default: $COMMKIT_STORE_TOKEN)");
    sc->add_option("--timeout", ca.timeout_s, "Seconds to wait (default 30)")->check(CLI::NonNegativeNumber);
    return sc;
  };
  auto* set = client("set", "Set KEY to VALUE");
  set->add_option("key", key)->required();
  set->add_option("value", value)->required();
  auto* get = client("get", "Print the value of KEY (waits up to --timeout for it)");
  get->add_option("key", key)->required();
  auto* add = client("add", "Add DELTA to the integer at KEY and print the result");
  add->add_option("key", key)->required();
  add->add_option("delta", delta);
  auto* check = client("check", "Exit 0 when all KEYS exist, 3 otherwise");
  check->add_option("keys", keys)->required();
  auto* wait = client("wait", "Wait up to --timeout for all KEYS");
  wait->add_option("keys", keys)->required();
  auto* del = client("delete", "Delete KEY");
  del->add_option("key", key)->required();
  auto* numkeys = client("num-keys", "Print the number of keys");
  auto* rdzv = app.add_subcommand("rendezvous", "Join the launcher's job and report every rank's host");
  double rdzv_timeout = 60;
  rdzv->add_option("--timeout", rdzv_timeout, "Seconds to wait for all ranks (default 60)")->check(CLI::NonNegativeNumber);

  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kUsage;
  }

  if (serve->parsed()) {
    if (serve_opts.token.empty()) {
      if (const char* t = std::getenv("COMMKIT_STORE_TOKEN")) serve_opts.token = t;
    }
    serve_opts.max_pending_bytes = static_cast<std::size_t>(max_pending_mib * (1 << 20));
    serve_opts.frame_timeout = std::chrono::milliseconds(static_cast<long long>(frame_timeout_s * 1000));
    serve_opts.idle_timeout = std::chrono::milliseconds(static_cast<long long>(idle_timeout_s * 1000));
    auto server = TcpStoreServer::Start(serve_opts);
    if (!server.ok()) return Fail(server.status());
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    if (json_out) {
      std::printf("%s\n", json{{"host", serve_opts.host}, {"port", (*server)->port()},
                               {"token_required", !serve_opts.token.empty()}}.dump().c_str());
    } else {
      std::printf("commkit-store: serving on %s:%d%s\n", serve_opts.host.c_str(), (*server)->port(),
                  serve_opts.token.empty() ? " (no token: any client is accepted)" : " (job token required)");
    }
    std::fflush(stdout);
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto st = (*server)->stats();
    std::fprintf(stderr, "commkit-store: stopping; %lld connections served, %lld requests, %lld keys\n",
                 static_cast<long long>(st.connections_accepted), static_cast<long long>(st.requests),
                 static_cast<long long>(st.keys));
    return 0;
  }

  if (rdzv->parsed()) {
    RendezvousOptions ro;
    ro.timeout = std::chrono::milliseconds(static_cast<long long>(rdzv_timeout * 1000));
    auto r = RendezvousFromEnvironment(ro);
    if (!r.ok()) return Fail(r.status());
    if (json_out) {
      std::printf("%s\n", json{{"launcher", std::string(ToString(r->info.launcher))}, {"rank", r->info.rank},
                               {"world_size", r->info.world_size}, {"hosts", r->hosts}}.dump().c_str());
    } else {
      std::printf("%s: all %d ranks arrived (%s)\n", r->info.Describe().c_str(), r->info.world_size,
                  r->store->Describe().c_str());
    }
    // Leave together: rank 0 may host the server, so nobody exits before everyone has read.
    auto left = r->store->Add("rdzv/left", 1);
    if (!left.ok()) return Fail(left.status());
    if (r->info.rank == 0) {
      auto deadline = std::chrono::steady_clock::now() + ro.timeout;
      while (std::chrono::steady_clock::now() < deadline) {
        auto n = r->store->Add("rdzv/left", 0);
        if (!n.ok() || *n >= r->info.world_size) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return 0;
  }

  auto store = Connect(ca);
  if (!store.ok()) return Fail(store.status());
  auto timeout = std::chrono::milliseconds(static_cast<long long>(ca.timeout_s * 1000));
  if (set->parsed()) {
    Status s = (*store)->Set(key, value);
    return s.ok() ? 0 : Fail(s);
  }
  if (get->parsed()) {
    auto v = (*store)->Get(key, timeout);
    if (!v.ok()) return v.status().code() == StatusCode::kTimeout ? (Fail(v.status()), kNotFound) : Fail(v.status());
    if (json_out) std::printf("%s\n", json{{"key", key}, {"value", *v}}.dump().c_str());
    else std::printf("%s\n", v->c_str());
    return 0;
  }
  if (add->parsed()) {
    auto v = (*store)->Add(key, delta);
    if (!v.ok()) return Fail(v.status());
    std::printf(json_out ? "{\"value\":%lld}\n" : "%lld\n", static_cast<long long>(*v));
    return 0;
  }
  if (check->parsed()) {
    auto v = (*store)->Check(keys);
    if (!v.ok()) return Fail(v.status());
    if (json_out) std::printf("%s\n", json{{"all_present", *v}}.dump().c_str());
    return *v ? 0 : kNotFound;
  }
  if (wait->parsed()) {
    Status s = (*store)->Wait(keys, timeout);
    return s.ok() ? 0 : Fail(s);
  }
  if (del->parsed()) {
    auto v = (*store)->Delete(key);
    if (!v.ok()) return Fail(v.status());
    return *v ? 0 : kNotFound;
  }
  if (numkeys->parsed()) {
    auto v = (*store)->NumKeys();
    if (!v.ok()) return Fail(v.status());
    std::printf(json_out ? "{\"num_keys\":%lld}\n" : "%lld\n", static_cast<long long>(*v));
    return 0;
  }
  return kUsage;
}
