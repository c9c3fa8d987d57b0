// comm_pg_fault_inject: one rank of a fault-injection trial, started by a launcher (commkit-run,
// mpirun, torchrun) and driven by tests/comm/scripts/pg_fault_inject.py.
//
//   comm_pg_fault_inject --backend gloo|host|mpi --fault none|kill|delay|mismatch|store-host-exits
//                        [--victim R] [--timeout-ms T] [--count N]
//
// Every rank runs all-reduce #1 (all arrive), then all-reduce #2 with the fault on rank R:
//   kill      R kills itself (SIGKILL) 300 ms after #1, without entering #2
//   delay     R enters #2 late by the timeout + 1.5 s (late past the others' timeout), then exits
//   mismatch  R passes a different count at #2
//   store-host-exits  no fault in the collectives: rank 0 (which hosts the store under mpirun/srun/
//             torchrun) exits right after #2; the others destroy their group 1 s later (issue: their
//             destructor waited for the store's timeout)
// Each rank prints one line "PGFI {json}" with its outcome (ok / error, the status code and message,
// unix-ms times of entering #2 and of the error) and "PGFI-EXIT {json}" when it is about to exit
// (after its ProcessGroup is destroyed; under MPI before MPI_Finalize). Exit status: 0 on success, 1
// when #2 failed, 2 for usage or setup errors.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "commkit/comm/process_group.h"
#include "commkit/comm/registry.h"
#include "commkit/common/strings.h"
#ifdef COMMKIT_FAULT_INJECT_MPI
#include "commkit/comm/mpi/mpi_backend.h"
#endif

namespace {

using namespace std::chrono_literals;

std::int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

int g_rank = -1;

void PrintExit() {
  std::printf("PGFI-EXIT {\"rank\":%d,\"exit_ms\":%lld}\n", g_rank, static_cast<long long>(UnixMs()));
  std::fflush(stdout);
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "comm_pg_fault_inject: %s\nusage: comm_pg_fault_inject --backend gloo|host|mpi "
               "--fault none|kill|delay|mismatch|store-host-exits [--victim R] [--timeout-ms T] [--count N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace commkit;
  std::string backend = "gloo", fault = "none";
  int victim = 1;
  std::int64_t timeout_ms = 2000, count = 4096;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      Usage("fault-injection trial rank");
      return 0;
    }
    if (a == "--backend" && (v = value())) backend = v;
    else if (a == "--fault" && (v = value())) fault = v;
    else if (a == "--victim" && (v = value())) victim = std::atoi(v);
    else if (a == "--timeout-ms" && (v = value())) timeout_ms = std::atoll(v);
    else if (a == "--count" && (v = value())) count = std::atoll(v);
    else return Usage(StrCat("unknown or incomplete argument '", a, "'").c_str());
  }
  if (fault != "none" && fault != "kill" && fault != "delay" && fault != "mismatch" && fault != "store-host-exits")
    return Usage(StrCat("unknown fault '", fault, "'").c_str());
  if (timeout_ms <= 0 || count <= 0) return Usage("--timeout-ms and --count must be positive");
#ifdef COMMKIT_FAULT_INJECT_MPI
  Registry::Default().Register(comm::mpi::MpiBackendInfo());
#endif
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  int rc = 0;
  {
    auto pg = ProcessGroup::FromEnvironment({.backend = backend, .timeout = timeout});
    if (!pg.ok()) {
      std::fprintf(stderr, "comm_pg_fault_inject: %s\n", pg.status().ToString().c_str());
      return 2;
    }
    g_rank = (*pg)->rank();
    // Registered after the group (and MPI) exist: runs before MPI's own exit handler.
    std::atexit(&PrintExit);
    const int rank = (*pg)->rank();
    std::vector<float> buf(static_cast<std::size_t>(count) + 1, 1.0f);
    auto first = (*pg)->Allreduce(nullptr, buf.data(), static_cast<std::size_t>(count), DataType::kFloat32,
                                  ReduceOp::Sum());
    Status s = first.ok() ? (*first)->Wait(timeout + 30s) : first.status();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: all-reduce #1 failed (no fault injected yet): %s\n", rank, s.ToString().c_str());
      return 2;
    }
    const bool me = rank == victim;
    if (fault == "kill" && me) {
      std::this_thread::sleep_for(300ms);
      std::raise(SIGKILL);
    }
    if (fault == "delay" && me) std::this_thread::sleep_for(timeout + 1500ms);
    std::size_t n = static_cast<std::size_t>(count) + (fault == "mismatch" && me ? 1 : 0);
    const std::int64_t start_ms = UnixMs();
    auto second = (*pg)->Allreduce(nullptr, buf.data(), n, DataType::kFloat32, ReduceOp::Sum());
    s = second.ok() ? (*second)->Wait(timeout + 30s) : second.status();
    const std::int64_t end_ms = UnixMs();
    std::printf("PGFI {\"rank\":%d,\"fault\":%s,\"victim\":%d,\"outcome\":\"%s\",\"code\":%s,\"start_ms\":%lld,"
                "\"end_ms\":%lld,\"message\":%s}\n",
                rank, JsonString(fault).c_str(), victim, s.ok() ? "ok" : "error",
                JsonString(s.ok() ? "OK" : std::string(ToString(s.code()))).c_str(),
                static_cast<long long>(start_ms), static_cast<long long>(end_ms), JsonString(s.message()).c_str());
    std::fflush(stdout);
    rc = s.ok() ? 0 : 1;
    if (fault == "store-host-exits" && rank != 0) std::this_thread::sleep_for(1s);  // rank 0 and its store are gone
  }
  return rc;
}
