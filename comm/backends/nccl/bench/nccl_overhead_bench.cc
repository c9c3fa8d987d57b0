// commkit-nccl-overhead: per-call overhead of commkit's NCCL path against raw ncclAllReduce, in one
// binary, on one communicator per path (world size 1 on GPU 0 unless run under commkit-run).
//
//   commkit-nccl-overhead [--iters N] [--sizes 4,4096,1048576] [--json out.json]
//
// For each message size it measures, for both paths, the host time to enqueue one allreduce
// (median and p90 over iterations, stream drained every 64 calls) and the end-to-end time of N
// back-to-back calls. "engine" goes through NcclEngine (work object, CUDA event, watchdog-visible
// bookkeeping); "backend" (when the pg API is built) goes through Backend::Run, i.e. everything a
// ProcessGroup collective costs below its own validation.
// Exit: 0 ok, 1 error, 2 no GPU (reason printed).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commkit/comm/nccl/nccl_runtime.h"
#include "commkit/common/strings.h"
#include "nccl_collectives.h"
#include "nccl_comm.h"
#include "nccl_engine.h"

#if defined(COMMKIT_NCCL_HAS_BACKEND)
#include "commkit/comm/hash_store.h"
#include "commkit/comm/nccl/nccl_backend.h"
#endif

namespace nk = commkit::comm::nccl;
using Clock = std::chrono::steady_clock;

namespace {

struct Stats {
  double median_us = 0;
  double p90_us = 0;
  double total_us_per_op = 0;
};

Stats Summarise(std::vector<double> us, double total_us, int iters) {
  std::sort(us.begin(), us.end());
  Stats s;
  s.median_us = us[us.size() / 2];
  s.p90_us = us[std::min(us.size() - 1, us.size() * 9 / 10)];
  s.total_us_per_op = total_us / iters;
  return s;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "commkit-nccl-overhead: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-call overhead of commkit's NCCL allreduce vs raw ncclAllReduce"};
  int iters = 2000;
  std::vector<std::size_t> sizes = {4, 4096, 1 << 20};
  std::string json_path;
  int device = 0;
  app.add_option("--iters", iters, "calls per size and path")->check(CLI::Range(64, 1000000));
  app.add_option("--sizes", sizes, "message sizes in bytes (multiples of 4)")->delimiter(',');
  app.add_option("--device", device, "CUDA device");
  app.add_option("--json", json_path, "write results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  auto info = nk::ProbeNcclRuntime();
  if (!info.ok()) {
    std::fprintf(stderr, "commkit-nccl-overhead: %s\n", info.status().ToString().c_str());
    return 2;
  }
  std::printf("%s\n", info->ToString().c_str());

  nk::NcclCommConfig cfg;
  cfg.name = "overhead-raw";
  auto deadline = Clock::now() + std::chrono::seconds(120);
  // Raw path: a blocking communicator, as a plain NCCL program would use.
  cfg.blocking = true;
  auto id1 = nk::NcclComm::NewUniqueId();
  if (!id1.ok()) return Fail(id1.status().ToString());
  auto raw_comm = nk::NcclComm::InitRank(*id1, 1, 0, device, cfg, deadline, std::chrono::seconds(10));
  if (!raw_comm.ok()) return Fail(raw_comm.status().ToString());
  // commkit path: nonblocking communicator + engine, as the backend creates them.
  cfg.blocking = false;
  cfg.name = "overhead-commkit";
  auto id2 = nk::NcclComm::NewUniqueId();
  if (!id2.ok()) return Fail(id2.status().ToString());
  auto ck_comm = nk::NcclComm::InitRank(*id2, 1, 0, device, cfg, deadline, std::chrono::seconds(10));
  if (!ck_comm.ok()) return Fail(ck_comm.status().ToString());
  auto engine = std::make_shared<nk::NcclEngine>(std::move(*ck_comm), nk::NcclEngineOptions{});

#if defined(COMMKIT_NCCL_HAS_BACKEND)
  // Third path: the full Backend::Run (argument plan, Work object) on its own communicator.
  commkit::BackendContext bctx;
  bctx.store = std::make_shared<commkit::HashStore>();
  bctx.group_name = "overhead-backend";
  nk::NcclBackendOptions bopts;
  bopts.device = device;
  auto backend = nk::CreateNcclBackend(bctx, bopts);
  if (!backend.ok()) return Fail(backend.status().ToString());
  const int kPaths = 3;
#else
  const int kPaths = 2;
#endif
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return Fail("cudaStreamCreate failed");
  nlohmann::json results = nlohmann::json::array();
  std::printf("%12s %8s %12s %12s %14s\n", "bytes", "path", "median_us", "p90_us", "e2e_us_per_op");
  for (std::size_t bytes : sizes) {
    std::size_t count = std::max<std::size_t>(1, bytes / 4);
    void* buf = nullptr;
    if (cudaMalloc(&buf, count * 4) != cudaSuccess) return Fail("cudaMalloc failed");
    ncclComm_t rc = (*raw_comm)->raw();
    for (int path = 0; path < kPaths; ++path) {
      std::vector<double> per_call;
      per_call.reserve(iters);
      // Warm-up.
      for (int i = 0; i < 32; ++i) ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, rc, stream);
      cudaStreamSynchronize(stream);
      auto start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        auto t0 = Clock::now();
        if (path == 0) {
          if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, rc, stream) != ncclSuccess) return Fail("ncclAllReduce failed");
        } else if (path == 2) {
#if defined(COMMKIT_NCCL_HAS_BACKEND)
          commkit::CollectiveArgs a;
          a.kind = commkit::CollectiveKind::kAllreduce;
          a.recv = buf;
          a.count = count;
          a.memory = commkit::MemoryKind::kDevice;
          a.stream = stream;
          a.sequence = static_cast<std::uint64_t>(i) + 1;
          auto w = (*backend)->Run(a);
          if (!w.ok()) return Fail(w.status().ToString());
#endif
        } else {
          auto w = engine->Enqueue("allreduce", stream, {nk::AllReduceCall(buf, buf, count, ncclFloat32, ncclSum)}, {},
                                   std::chrono::milliseconds(0));
          if (!w.ok()) return Fail(w.status().ToString());
        }
        per_call.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (i % 64 == 63) cudaStreamSynchronize(stream);  // keep the queue short
      }
      cudaStreamSynchronize(stream);
      double total = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (path == 1) {
        // The engine's pending list is drained by the watchdog in the backend; here by Check().
        (void)engine->Check(Clock::now());
      }
      Stats s = Summarise(per_call, total, iters);
      const char* name = path == 0 ? "raw" : (path == 1 ? "engine" : "backend");
      std::printf("%12zu %8s %12.2f %12.2f %14.2f\n", bytes, name, s.median_us, s.p90_us, s.total_us_per_op);
      results.push_back({{"bytes", bytes}, {"path", name}, {"iters", iters}, {"enqueue_median_us", s.median_us},
                         {"enqueue_p90_us", s.p90_us}, {"e2e_us_per_op", s.total_us_per_op}});
    }
    cudaFree(buf);
  }
  cudaStreamDestroy(stream);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << nlohmann::json{{"device", info->ToString()}, {"results", results}}.dump(2) << "\n";
    if (!out) return Fail("cannot write " + json_path);
  }
  return 0;
}
