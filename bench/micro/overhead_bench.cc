// Per-call overhead of the process-group wrapper (Google Benchmark), 8 B .. 1 MiB allreduce of f32 on a
// one-rank group, for each backend linked in, next to the raw library call (--raw baseline) where one
// is compiled in (host: commkit's own engine through Backend::Run, without ProcessGroup). A one-rank group isolates the software path (validation, mismatch fingerprint, Work
// bookkeeping, backend dispatch) from the network. Two-rank overhead: commkit-bench --raw mpi under
// mpirun (docs/benchmarks.md).
//
//   build/bin/commkit-bench-overhead --benchmark_filter=Allreduce
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "commkit/bench/raw.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/process_group.h"

namespace {

using commkit::DataType;
using commkit::ProcessGroup;
using commkit::ReduceOp;

void BM_ProcessGroupAllreduce(benchmark::State& state, const char* backend) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  auto group = ProcessGroup::Create(std::make_shared<commkit::HashStore>(), 0, 1, {.backend = backend});
  if (!group.ok()) {
    state.SkipWithError(group.status().ToString().c_str());
    return;
  }
  std::vector<float> send(bytes / sizeof(float), 1.0f), recv(send.size());
  for (auto _ : state) {
    auto work = (*group)->Allreduce(send.data(), recv.data(), send.size(), DataType::kFloat32, ReduceOp::Sum());
    if (!work.ok() || !(*work)->Wait().ok()) {
      state.SkipWithError("allreduce failed");
      return;
    }
    benchmark::DoNotOptimize(recv.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

void BM_RawAllreduce(benchmark::State& state, const char* lib) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  commkit::bench::BenchOptions options;
  // The host engine sets itself up through a store (its own here); the other libraries ignore it.
  auto raw = commkit::bench::MakeRawCollective(lib, options, 0, 1, std::make_shared<commkit::HashStore>());
  if (!raw.ok()) {
    state.SkipWithError(raw.status().ToString().c_str());
    return;
  }
  std::vector<float> send(bytes / sizeof(float), 1.0f), recv(send.size());
  commkit::bench::BufferCounts counts;
  counts.count = counts.send = counts.recv = send.size();
  counts.bytes = bytes;
  for (auto _ : state) {
    if (!(*raw)->run(send.data(), recv.data(), counts).ok()) {
      state.SkipWithError("raw allreduce failed");
      return;
    }
    benchmark::DoNotOptimize(recv.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

BENCHMARK_CAPTURE(BM_ProcessGroupAllreduce, host, "host")->RangeMultiplier(8)->Range(8, 1 << 20);
BENCHMARK_CAPTURE(BM_ProcessGroupAllreduce, gloo, "gloo")->RangeMultiplier(8)->Range(8, 1 << 20);
BENCHMARK_CAPTURE(BM_ProcessGroupAllreduce, mpi, "mpi")->RangeMultiplier(8)->Range(8, 1 << 20);
BENCHMARK_CAPTURE(BM_RawAllreduce, host, "host")->RangeMultiplier(8)->Range(8, 1 << 20);
BENCHMARK_CAPTURE(BM_RawAllreduce, mpi, "mpi")->RangeMultiplier(8)->Range(8, 1 << 20);

}  // namespace

BENCHMARK_MAIN();
