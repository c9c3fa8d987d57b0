// Data-parallel training loop, the shape DDP/Horovod use: every rank computes gradients for its own
// data, the gradients are packed into fixed-size buckets in backward order, and each bucket's AVG
// all-reduce is launched as soon as the bucket is full, so communication overlaps with the rest of the
// backward pass; the optimizer step waits for all buckets. The model and the "gradients" are synthetic
// and deterministic, so every rank can check the result exactly.
//
//   commkit-run -n 4 -- ddp_allreduce --backend gloo --steps 10 --bucket-mb 4
//   mpirun -np 4 ddp_allreduce --backend mpi        (program linked with commkit::comm_mpi)
//
// Exit codes: 0 ok, 1 communication error (the message names the op and the missing ranks),
// 2 wrong result (replicas diverged), 64 bad command line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commkit/comm/process_group.h"
#include "commkit/comm/registry.h"
#if defined(DDP_WITH_MPI)
#include "commkit/comm_mpi/mpi_backend.h"
#endif

namespace {

using commkit::DataType;
using commkit::ProcessGroup;
using commkit::ReduceOp;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string backend = "auto";
  int steps = 10;
  double bucket_mb = 4.0;
  float lr = 0.1f;
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      std::printf("usage: ddp_allreduce [--backend gloo|mpi|nccl|auto] [--steps N] [--bucket-mb MB] [--lr X]\n"
                  "Run under a launcher (commkit-run, torchrun-style env, mpirun, srun).\n");
      std::exit(0);
    } else if (a == "--backend" && (v = value())) {
      f.backend = v;
    } else if (a == "--steps" && (v = value())) {
      f.steps = std::atoi(v);
    } else if (a == "--bucket-mb" && (v = value())) {
      f.bucket_mb = std::atof(v);
    } else if (a == "--lr" && (v = value())) {
      f.lr = static_cast<float>(std::atof(v));
    } else {
      std::fprintf(stderr, "ddp_allreduce: unknown or incomplete argument '%s' (see --help)\n", a.c_str());
      return false;
    }
  }
  return f.steps > 0 && f.bucket_mb > 0;
}

// A layer's parameters and gradient (float32).
struct Layer {
  std::vector<float> param;
  std::vector<float> grad;
};

// Rank r's gradient for element i of layer l at step s: differs per rank, so the AVG matters.
float Gradient(int rank, int step, std::size_t layer, std::size_t i) {
  return static_cast<float>((rank + 1) * ((i + layer + static_cast<std::size_t>(step)) % 5)) * 0.25f;
}
// The average of Gradient over `size` ranks.
float AverageGradient(int size, int step, std::size_t layer, std::size_t i) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += Gradient(r, step, layer, i);
  return sum / static_cast<float>(size);
}

// A bucket: a flat gradient buffer and the (layer, offset, count) slices it carries.
struct Bucket {
  struct Slice {
    std::size_t layer, offset, count, at;
  };
  std::vector<float> flat;
  std::vector<Slice> slices;
  std::unique_ptr<commkit::Work> work;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 64;
#if defined(DDP_WITH_MPI)
  commkit::Registry::Default().Register(commkit::MpiBackendInfo());
#endif

  auto pg_or = ProcessGroup::FromEnvironment({.backend = flags.backend, .name = "ddp"});
  if (!pg_or.ok()) {
    std::fprintf(stderr, "ddp_allreduce: %s\n", pg_or.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& pg = **pg_or;
  const int rank = pg.rank(), size = pg.size();

  // A small "model": layer sizes of a transformer-ish stack (odd sizes on purpose).
  const std::vector<std::size_t> sizes = {50'257, 768, 589'824, 2'304, 589'824, 768, 2'359'296, 3'072, 2'359'296, 768, 1'000};
  std::vector<Layer> layers(sizes.size());
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    layers[l].param.assign(sizes[l], 1.0f);  // identical initial replicas (a broadcast from rank 0 in real code)
    layers[l].grad.assign(sizes[l], 0.0f);
  }
  const std::size_t bucket_elems = static_cast<std::size_t>(flags.bucket_mb * 1024 * 1024 / sizeof(float));
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  if (rank == 0)
    std::printf("ddp_allreduce: %d ranks, backend %s, %zu parameters, buckets of %.1f MiB\n", size,
                std::string(pg.backend_name()).c_str(), total, flags.bucket_mb);

  for (int step = 0; step < flags.steps; ++step) {
    auto t0 = Clock::now();
    std::vector<Bucket> buckets;
    buckets.emplace_back();
    auto launch = [&](Bucket& b) {
      auto w = pg.Allreduce(nullptr, b.flat.data(), b.flat.size(), DataType::kFloat32, ReduceOp::Avg());
      if (!w.ok()) {
        std::fprintf(stderr, "ddp_allreduce: rank %d: %s\n", rank, w.status().ToString().c_str());
        std::exit(1);
      }
      b.work = std::move(w).value();
    };
    // "Backward": gradients appear from the last layer to the first; a full bucket is launched at once.
    for (std::size_t l = layers.size(); l-- > 0;) {
      Layer& layer = layers[l];
      for (std::size_t i = 0; i < layer.grad.size(); ++i) layer.grad[i] = Gradient(rank, step, l, i);
      std::size_t done = 0;
      while (done < layer.grad.size()) {
        Bucket& b = buckets.back();
        std::size_t n = std::min(layer.grad.size() - done, bucket_elems - b.flat.size());
        b.slices.push_back({l, done, n, b.flat.size()});
        b.flat.insert(b.flat.end(), layer.grad.begin() + static_cast<std::ptrdiff_t>(done),
                      layer.grad.begin() + static_cast<std::ptrdiff_t>(done + n));
        done += n;
        if (b.flat.size() == bucket_elems) {
          launch(b);
          buckets.emplace_back();
        }
      }
    }
    if (!buckets.back().flat.empty()) launch(buckets.back());
    else buckets.pop_back();
    // Optimizer step: wait for each bucket, unpack, SGD update.
    for (Bucket& b : buckets) {
      commkit::Status s = b.work->Wait(std::chrono::minutes(5));
      if (!s.ok()) {
        std::fprintf(stderr, "ddp_allreduce: rank %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
      for (const auto& sl : b.slices) {
        Layer& layer = layers[sl.layer];
        for (std::size_t i = 0; i < sl.count; ++i) {
          layer.grad[sl.offset + i] = b.flat[sl.at + i];
          layer.param[sl.offset + i] -= flags.lr * b.flat[sl.at + i];
        }
      }
    }
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // Check: the averaged gradient is exact, so every replica holds the same parameters.
    std::size_t wrong = 0;
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t i = 0; i < layers[l].grad.size(); i += 61)
        if (std::fabs(layers[l].grad[i] - AverageGradient(size, step, l, i)) > 1e-5f) ++wrong;
    if (wrong != 0) {
      std::fprintf(stderr, "ddp_allreduce: rank %d step %d: %zu wrong gradient elements\n", rank, step, wrong);
      return 2;
    }
    if (rank == 0)
      std::printf("step %d: %zu buckets, %.1f ms, %.2f GB/s algorithm bandwidth\n", step, buckets.size(), ms,
                  static_cast<double>(total * sizeof(float)) / (ms * 1e6));
  }
  // Replicas agree: compare a checksum through MIN and MAX all-reduces.
  double checksum = 0;
  for (const auto& l : layers)
    for (std::size_t i = 0; i < l.param.size(); i += 97) checksum += l.param[i] * static_cast<double>(i % 13 + 1);
  double lo = checksum, hi = checksum;
  auto w1 = pg.Allreduce(nullptr, &lo, 1, DataType::kFloat64, ReduceOp::Min());
  auto w2 = pg.Allreduce(nullptr, &hi, 1, DataType::kFloat64, ReduceOp::Max());
  if (!w1.ok() || !w2.ok() || !(*w1)->Wait().ok() || !(*w2)->Wait().ok()) {
    std::fprintf(stderr, "ddp_allreduce: rank %d: checksum all-reduce failed\n", rank);
    return 1;
  }
  if (lo != hi) {
    std::fprintf(stderr, "ddp_allreduce: replicas diverged: checksum min %.17g max %.17g\n", lo, hi);
    return 2;
  }
  if (rank == 0) std::printf("ddp_allreduce: %d steps done; replicas agree (checksum %.6g)\n", flags.steps, checksum);
  return 0;
}
