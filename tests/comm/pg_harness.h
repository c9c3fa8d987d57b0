// Test harness for process groups: run N ranks as threads on one HashStore, as forked processes over a
// TcpStore, or as mpirun-launched processes, typed buffer helpers
// and an independent reference.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "commkit/comm/hash_store.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/comm/process_group.h"
#include "commkit/comm/reduce_kernels.h"
#include "test_support.h"

// Asserts that `expr` (a Result<std::unique_ptr<Work>>) was accepted and its Work completed OK within
// `timeout` (Synchronize: host work is done, device work has finished on its stream).
#define COMMKIT_WAIT_OK_WITHIN(expr, timeout)                              \
  do {                                                                     \
    auto commkit_work_ = (expr);                                           \
    ASSERT_TRUE(commkit_work_.ok()) << commkit_work_.status().ToString();  \
    Status commkit_ws_ = (*commkit_work_)->Synchronize(timeout);           \
    ASSERT_TRUE(commkit_ws_.ok()) << commkit_ws_.ToString();               \
  } while (false)
#define COMMKIT_WAIT_OK(expr) COMMKIT_WAIT_OK_WITHIN(expr, std::chrono::minutes(5))

namespace commkit::testing {

// Process mode, set by a test main launched by mpirun: this process is rank `rank` of `size`, and every
// RunRanks() call creates one group over a fresh prefix of `store` (the same on every rank, as every
// rank runs the same tests in the same order).
struct ProcessWorld {
  int rank = -1;
  int size = 0;
  std::shared_ptr<Store> store;
  int runs = 0;
};
inline ProcessWorld& World() {
  static ProcessWorld world;
  return world;
}

// Runs body(pg) on `size` ranks, each in a forked child process with its own TcpStore client of a
// server in this process. Returns each child's exit code (body's return value), or -signal when a
// child was killed. Children still running after `limit` are killed (SIGKILL) and reported as -9, so
// nothing hangs. Children leave with _exit() (no static destructors of the parent run twice).
// `in_child(rank)`, when given, runs in each child before its group is created (per-rank environment).
inline std::vector<int> ForkRanks(const std::string& backend, int size, const std::function<int(ProcessGroup&)>& body,
                                  ProcessGroupOptions options = {},
                                  std::chrono::milliseconds limit = std::chrono::seconds(240),
                                  int simulated_hosts = 0, const std::function<void(int)>& in_child = nullptr) {
  // The store server runs in its own forked process, so this process has no threads when it forks the
  // ranks (a lock held by another thread at fork time would deadlock a child).
  int fds[2];
  if (::pipe(fds) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t server_pid = ::fork();
  if (server_pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    TcpStoreServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.token = "pg-fork";
    auto server = TcpStoreServer::Start(so);
    int port = server.ok() ? (*server)->port() : -1;
    if (!server.ok()) std::fprintf(stderr, "store server: %s\n", server.status().ToString().c_str());
    (void)!::write(fds[1], &port, sizeof port);
    ::close(fds[1]);
    while (true) ::pause();  // killed by the parent
  }
  ::close(fds[1]);
  int port = -1;
  if (::read(fds[0], &port, sizeof port) != static_cast<ssize_t>(sizeof port)) port = -1;
  ::close(fds[0]);
  struct ServerReaper {
    pid_t pid;
    ~ServerReaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{server_pid};
  EXPECT_GT(port, 0) << "the store server did not start";
  if (port <= 0) return {};
  options.backend = backend;
  if (options.timeout == ProcessGroupOptions{}.timeout) options.timeout = std::chrono::seconds(60);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      // Ranks [h*size/hosts, (h+1)*size/hosts) pretend to be host h: they never share memory with
      // the other hosts' ranks (see COMMKIT_HOST_DOMAIN), so the host backend's inter-host path runs.
      if (simulated_hosts > 0)
        ::setenv("COMMKIT_HOST_DOMAIN", ("simhost" + std::to_string(rank * simulated_hosts / size)).c_str(), 1);
      if (in_child) in_child(rank);
      {
        TcpStoreOptions o;
        o.port = port;
        o.token = "pg-fork";
        o.timeout = options.timeout;
        auto store = TcpStore::Create(o);
        if (!store.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, store.status().ToString().c_str());
          code = 90;
        } else {
          auto pg = ProcessGroup::Create(std::shared_ptr<Store>(std::move(store).value()), rank, size, options);
          if (!pg.ok()) {
            std::fprintf(stderr, "rank %d: %s\n", rank, pg.status().ToString().c_str());
            code = 91;
          } else {
            code = body(**pg);
            if (::testing::Test::HasFailure() && code == 0) code = 1;
          }
        }
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), 0);
  std::vector<bool> done(pids.size(), false);
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::size_t remaining = pids.size();
  while (remaining > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --remaining;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "forked ranks still running after " << limit.count() << " ms: killed";
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) ::kill(pids[i], SIGKILL);
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        int status = 0;
        ::waitpid(pids[i], &status, 0);
        codes[i] = -SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

// A one-rank `backend` group with `variable`=`value` fails to create with InvalidArgument whose message
// names the variable, the value and each of `words`.
inline void ExpectInvalidSetting(const std::string& backend, const char* variable, const char* value,
                                 std::initializer_list<const char*> words) {
  ScopedEnv env(variable, value);
  ProcessGroupOptions options;
  options.backend = backend;
  options.timeout = std::chrono::seconds(30);
  auto pg = ProcessGroup::Create(std::make_shared<HashStore>(), 0, 1, options);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), StatusCode::kInvalidArgument) << pg.status().ToString();
  for (const char* word : std::initializer_list<const char*>{variable, value})
    EXPECT_NE(pg.status().message().find(word), std::string::npos) << pg.status().ToString();
  for (const char* word : words) EXPECT_NE(pg.status().message().find(word), std::string::npos) << pg.status().ToString();
}

// Runs body(pg) on `size` ranks. `backend_spec` is a backend name ("gloo": ranks are threads over one
// HashStore), or "<name>+fork" (ranks are forked processes over a TcpStore). Under mpirun (World() set)
// every spec runs body once in this process, as the launcher's rank.
inline void RunRanks(const std::string& backend_spec, int size, const std::function<void(ProcessGroup&)>& body,
                     ProcessGroupOptions options = {}) {
  std::string backend = backend_spec;
  bool fork_mode = false;
  int simulated_hosts = 0;
  if (auto at = backend.find('@'); at != std::string::npos) {  // "host+fork@2": ranks on 2 pretend hosts
    simulated_hosts = std::stoi(backend.substr(at + 1));
    backend = backend.substr(0, at);
  }
  if (auto plus = backend.find("+fork"); plus != std::string::npos) {
    backend = backend.substr(0, plus);
    fork_mode = true;
  }
  options.backend = backend;
  if (options.timeout == ProcessGroupOptions{}.timeout) options.timeout = std::chrono::seconds(60);
  if (World().size > 0) {
    ASSERT_EQ(size, World().size) << "under mpirun the group is the launcher's world";
    auto store = std::make_shared<PrefixStore>("run" + std::to_string(++World().runs), World().store);
    auto pg = ProcessGroup::Create(store, World().rank, size, options);
    ASSERT_TRUE(pg.ok()) << "rank " << World().rank << ": " << pg.status().ToString();
    body(**pg);
    return;
  }
  if (fork_mode) {
    auto codes = ForkRanks(backend, size, [&](ProcessGroup& pg) {
      body(pg);
      return ::testing::Test::HasFailure() ? 1 : 0;
    }, options, std::chrono::seconds(240), simulated_hosts);
    for (std::size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "forked rank " << r << " failed (see its output above)";
    return;
  }
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto pg = ProcessGroup::Create(store, rank, size, options);
      ASSERT_TRUE(pg.ok()) << "rank " << rank << ": " << pg.status().ToString();
      body(**pg);
    });
  }
  for (auto& t : threads) t.join();
}

// Element i of dtype as a double, and back (the value must be representable).
inline double Load(DataType t, const void* p, std::size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const unsigned short*>(p)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const unsigned short*>(p)[i]);
    case DataType::kInt8: return static_cast<const std::int8_t*>(p)[i];
    case DataType::kUInt8: return static_cast<const std::uint8_t*>(p)[i];
    case DataType::kInt32: return static_cast<const std::int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
  }
  return 0;
}

inline void StoreValue(DataType t, void* p, std::size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kFloat16: static_cast<unsigned short*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<unsigned short*>(p)[i] = FloatToBFloat16(static_cast<float>(v)); break;
    case DataType::kInt8: static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v); break;
    case DataType::kUInt8: static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kInt32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
    case DataType::kInt64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
  }
}

// Small integers that every type holds exactly; PROD uses 1s and 2s so products stay small.
inline double Value(int rank, std::size_t i, ReduceKind op) {
  if (op == ReduceKind::kProd) return 1.0 + static_cast<double>((static_cast<std::size_t>(rank) + i) % 2);
  return 1.0 + static_cast<double>((static_cast<std::size_t>(rank) * 3 + i * 7) % 5);
}

// The reference reduction of Value(r, i) over ranks, in double, then as the type would hold it.
inline double Reference(DataType t, ReduceOp op, int size, std::size_t i) {
  double acc = 0;
  std::int64_t bits = 0;
  for (int r = 0; r < size; ++r) {
    double v = Value(r, i, op.kind);
    std::int64_t iv = static_cast<std::int64_t>(v);
    switch (op.kind) {
      case ReduceKind::kSum:
      case ReduceKind::kAvg: acc = r == 0 ? v : acc + v; break;
      case ReduceKind::kPreMulSum: acc = r == 0 ? v * op.scalar : acc + v * op.scalar; break;
      case ReduceKind::kProd: acc = r == 0 ? v : acc * v; break;
      case ReduceKind::kMin: acc = r == 0 ? v : std::min(acc, v); break;
      case ReduceKind::kMax: acc = r == 0 ? v : std::max(acc, v); break;
      case ReduceKind::kBand: bits = r == 0 ? iv : (bits & iv); break;
      case ReduceKind::kBor: bits = r == 0 ? iv : (bits | iv); break;
      case ReduceKind::kBxor: bits = r == 0 ? iv : (bits ^ iv); break;
    }
  }
  if (op.kind == ReduceKind::kBand || op.kind == ReduceKind::kBor || op.kind == ReduceKind::kBxor)
    return static_cast<double>(bits);
  if (op.kind == ReduceKind::kAvg) {
    if (IsFloatingPoint(t)) return acc / size;
    return static_cast<double>(static_cast<std::int64_t>(acc) / size);
  }
  return acc;
}

inline double Tolerance(DataType t, double expected) {
  switch (t) {
    case DataType::kFloat16: return 2e-3 * std::max(1.0, std::fabs(expected)) + 1e-3;
    case DataType::kBFloat16: return 1e-2 * std::max(1.0, std::fabs(expected)) + 1e-2;
    case DataType::kFloat32: return 1e-5 * std::max(1.0, std::fabs(expected));
    default: return 1e-12;
  }
}

// Where Buffers live: host memory by default. A device-backend test binary installs an allocator of
// memory both the host and the device can address (cudaMallocManaged), so the same suite checks
// results on the host while the backend works on device pointers.
struct BufferAllocator {
  void* (*allocate)(std::size_t bytes) = nullptr;
  void (*release)(void* p) = nullptr;
};
inline BufferAllocator& TestBufferAllocator() {
  static BufferAllocator allocator;
  return allocator;
}

// A typed buffer of n elements.
struct Buffer {
  Buffer(DataType t, std::size_t n) : type(t), count(n), size(std::max<std::size_t>(n * SizeOf(t), 1)) {
    const BufferAllocator& a = TestBufferAllocator();
    if (a.allocate != nullptr) {
      ptr = std::unique_ptr<unsigned char, void (*)(void*)>(static_cast<unsigned char*>(a.allocate(size)), a.release);
    } else {
      ptr = std::unique_ptr<unsigned char, void (*)(void*)>(static_cast<unsigned char*>(std::calloc(size, 1)), &std::free);
    }
  }
  void* data() { return ptr.get(); }
  double at(std::size_t i) const { return Load(type, ptr.get(), i); }
  void set(std::size_t i, double v) { StoreValue(type, ptr.get(), i, v); }
  DataType type;
  std::size_t count;
  std::size_t size;
  std::unique_ptr<unsigned char, void (*)(void*)> ptr{nullptr, &std::free};
};

}  // namespace commkit::testing
