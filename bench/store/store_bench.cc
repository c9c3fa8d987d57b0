// commkit-store-bench: rendezvous time for N clients and store operations per second, on loopback.
// A benchmark, not a test: numbers vary with the machine and its load; compare within one run.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "commkit/comm/tcp_store.h"
#include "commkit/common/config.h"
#include "commkit/common/strings.h"

namespace {

using namespace commkit;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// N clients connect, announce themselves and wait for all N (the rendezvous pattern).
Result<double> Rendezvous(int port, int clients, int threads) {
  std::vector<std::unique_ptr<TcpStore>> stores(clients);
  std::atomic<int> failed{0};
  auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = t; i < clients; i += threads) {
        TcpStoreOptions o;
        o.port = port;
        o.token = "bench";
        o.max_connections = 1;
        auto s = TcpStore::Create(o);
        if (!s.ok()) {
          ++failed;
          continue;
        }
        stores[i] = std::move(s).value();
        if (!stores[i]->Set(StrCat("r", clients, "/", i), "x").ok()) ++failed;
      }
      std::vector<std::string> keys;
      for (int r = 0; r < clients; ++r) keys.push_back(StrCat("r", clients, "/", r));
      for (int i = t; i < clients; i += threads)
        if (stores[i] && !stores[i]->Wait(keys, std::chrono::seconds(120)).ok()) ++failed;
    });
  }
  for (auto& th : pool) th.join();
  double took = Seconds(Clock::now() - start);
  if (failed) return Status::Internal(StrCat(failed.load(), " clients failed"));
  return took;
}

// Operations per second from `clients` concurrent clients.
double OpsPerSecond(int port, int clients, int ops_each, const std::string& op) {
  std::vector<std::unique_ptr<TcpStore>> stores;
  for (int i = 0; i < clients; ++i) {
    TcpStoreOptions o;
    o.port = port;
    o.token = "bench";
    stores.push_back(std::move(TcpStore::Create(o)).value());
  }
  (void)stores[0]->Set("k", std::string(64, 'v'));
  auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int c = 0; c < clients; ++c) {
    pool.emplace_back([&, c] {
      for (int i = 0; i < ops_each; ++i) {
        if (op == "set") (void)stores[c]->Set(StrCat("k", c), "value");
        else if (op == "get") (void)stores[c]->Get("k", std::chrono::seconds(10));
        else (void)stores[c]->Add("counter", 1);
      }
    });
  }
  for (auto& th : pool) th.join();
  return clients * ops_each / Seconds(Clock::now() - start);
}

// The store path of ProcessGroup's mismatch check (backends that can neither reduce host int64 nor
// check on their own communicator): per collective, every rank Sets "fp/<seq>/<rank>", MultiGets all
// N keys (parked until every rank has set its key) and Deletes its key of the previous collective.
// N persistent clients driven by `threads` threads; returns seconds per collective (mean of `rounds`
// after one warm-up round).
Result<double> FingerprintRounds(int port, int clients, int threads, int rounds) {
  std::vector<std::unique_ptr<TcpStore>> stores(clients);
  for (int i = 0; i < clients; ++i) {
    TcpStoreOptions o;
    o.port = port;
    o.token = "bench";
    o.max_connections = 1;
    auto s = TcpStore::Create(o);
    if (!s.ok()) return s.status();
    stores[i] = std::move(s).value();
  }
  std::atomic<int> failed{0};
  std::barrier sync(threads);
  Clock::time_point start;
  double took = 0;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int round = 0; round <= rounds; ++round) {
        sync.arrive_and_wait();
        if (t == 0 && round == 1) start = Clock::now();  // round 0 warms up
        const std::string prefix = StrCat("fpbench", clients, "/", round, "/");
        std::vector<std::string> keys;
        for (int r = 0; r < clients; ++r) keys.push_back(prefix + std::to_string(r));
        const std::string value = "-1234567890123456789";  // an int64 fingerprint in decimal
        for (int i = t; i < clients; i += threads)
          if (!stores[i]->Set(keys[i], value).ok()) ++failed;
        for (int i = t; i < clients; i += threads)
          if (!stores[i]->MultiGet(keys, std::chrono::seconds(600)).ok()) ++failed;
        if (round > 0) {
          for (int i = t; i < clients; i += threads)
            if (!stores[i]->Delete(StrCat("fpbench", clients, "/", round - 1, "/", i)).ok()) ++failed;
        }
      }
      sync.arrive_and_wait();
      if (t == 0) took = Seconds(Clock::now() - start);
    });
  }
  for (auto& th : pool) th.join();
  if (failed) return Status::Internal(StrCat(failed.load(), " store calls failed"));
  return took / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"commkit-store-bench: TcpStore rendezvous time and operations/s on loopback", "commkit-store-bench"};
  std::vector<int> sizes{64, 256, 1024};
  int ops = 2000;
  bool json_out = false;
  std::vector<int> fingerprint_sizes;
  int rounds = 5;
  app.add_option("--clients", sizes, "Rendezvous sizes (default 64 256 1024)");
  app.add_option("--fingerprint", fingerprint_sizes,
                 "Also time the store path of the mismatch check (Set, N-key MultiGet, Delete per rank and "
                 "collective) at these rank counts, e.g. 64 256 1024");
  app.add_option("--rounds", rounds, "Collectives per --fingerprint size (default 5, after one warm-up)")->check(CLI::Range(1, 1000));
  app.add_option("--ops", ops, "Operations per client for the ops/s runs (default 2000)");
  app.add_flag("--json", json_out, "JSON output");
  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));
  CLI11_PARSE(app, argc, argv);

  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);

  TcpStoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.token = "bench";
  auto server = TcpStoreServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  int port = (*server)->port();
  json out = {{"rendezvous", json::array()}, {"ops_per_second", json::array()}, {"fingerprint", json::array()},
              {"hardware_threads", std::thread::hardware_concurrency()}};
  if (!json_out) std::printf("%-28s %12s\n", "rendezvous (clients)", "seconds");
  for (int n : sizes) {
    if (static_cast<rlim_t>(2 * n + 64) > lim.rlim_cur) {
      std::fprintf(stderr, "skipping %d clients: RLIMIT_NOFILE %llu is too low\n", n,
                   static_cast<unsigned long long>(lim.rlim_cur));
      continue;
    }
    auto t = Rendezvous(port, n, std::min(n, 64));
    if (!t.ok()) {
      std::fprintf(stderr, "rendezvous %d: %s\n", n, t.status().ToString().c_str());
      return 1;
    }
    out["rendezvous"].push_back({{"clients", n}, {"seconds", *t}});
    if (!json_out) std::printf("%-28d %12.4f\n", n, *t);
  }
  if (!fingerprint_sizes.empty() && !json_out)
    std::printf("\n%-28s %12s %16s\n", "fingerprint path (ranks)", "s/collective", "keys read/s");
  for (int n : fingerprint_sizes) {
    if (static_cast<rlim_t>(2 * n + 64) > lim.rlim_cur) {
      std::fprintf(stderr, "skipping %d ranks: RLIMIT_NOFILE %llu is too low\n", n,
                   static_cast<unsigned long long>(lim.rlim_cur));
      continue;
    }
    auto t = FingerprintRounds(port, n, std::min(n, 64), rounds);
    if (!t.ok()) {
      std::fprintf(stderr, "fingerprint %d: %s\n", n, t.status().ToString().c_str());
      return 1;
    }
    const double keys_per_second = static_cast<double>(n) * n / *t;
    out["fingerprint"].push_back({{"ranks", n}, {"seconds_per_collective", *t}, {"keys_read_per_second", keys_per_second}});
    if (!json_out) std::printf("%-28d %12.4f %16.0f\n", n, *t, keys_per_second);
  }
  if (!json_out) std::printf("\n%-10s %-8s %16s\n", "op", "clients", "ops/s");
  for (const std::string op : {"set", "get", "add"}) {
    for (int clients : {1, 8}) {
      double rate = OpsPerSecond(port, clients, ops, op);
      out["ops_per_second"].push_back({{"op", op}, {"clients", clients}, {"ops_per_second", rate}});
      if (!json_out) std::printf("%-10s %-8d %16.0f\n", op.c_str(), clients, rate);
    }
  }
  if (json_out) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
