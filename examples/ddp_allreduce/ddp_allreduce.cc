// A data-parallel training loop's communication shape: each step computes gradients for a model's
// layers, packs them into buckets (~bucket-mb each, last layer first, as backward produces them),
// all-reduces each bucket with AVG as soon as it is full (overlapping later buckets' "compute"), waits
// for all buckets and applies SGD. Every rank checks the averaged gradients against the value it can
// compute locally, and all ranks must end with identical weights.
//
//   commkit-run -n 4 -- ddp_allreduce --steps 20 --backend gloo
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commkit/comm/process_group.h"
#include "commkit/common/config.h"

namespace {

struct Args {
  int steps = 10;
  double bucket_mb = 4;
  std::string backend = "auto";
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp_allreduce: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--steps") a.steps = std::atoi(next());
    else if (s == "--bucket-mb") a.bucket_mb = std::atof(next());
    else if (s == "--backend") a.backend = next();
    else if (s == "--version") {
      std::printf("%s\n", COMMKIT_VERSION_STRING);
      std::exit(0);
    } else if (s == "--help" || s == "-h") {
      std::printf("usage: ddp_allreduce [--steps N] [--bucket-mb MB] [--backend gloo|mpi|nccl|auto] [--version]\n"
                  "Run under a launcher: commkit-run -n 4 -- ddp_allreduce\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "ddp_allreduce: unknown argument %s (see --help)\n", s.c_str());
      std::exit(2);
    }
  }
  return a;
}

// The gradient of parameter i of layer l on this rank at this step: deterministic, rank-dependent.
float Gradient(int rank, int step, std::size_t l, std::size_t i) {
  return static_cast<float>(((rank + 1) * 0.5 + static_cast<double>((l * 131 + i * 7 + step) % 17)) * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  commkit::ProcessGroupOptions options;
  options.backend = args.backend;
  auto pg_or = commkit::ProcessGroup::FromEnvironment(options);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "ddp_allreduce: %s\n", pg_or.status().ToString().c_str());
    return 1;
  }
  commkit::ProcessGroup& pg = **pg_or;
  const int rank = pg.rank(), size = pg.size();

  // A small transformer-ish parameter set: 8 layers of mixed sizes (~6.3 M parameters, 25 MB of f32).
  std::vector<std::size_t> layer_sizes = {768 * 768, 768 * 3072, 3072 * 768, 768, 768 * 768, 768 * 3072, 3072 * 768, 50257};
  std::vector<std::vector<float>> weights, grads;
  for (auto n : layer_sizes) {
    weights.emplace_back(n, 0.01f);
    grads.emplace_back(n, 0.0f);
  }
  const std::size_t bucket_elems = static_cast<std::size_t>(args.bucket_mb * (1 << 20) / sizeof(float));

  double total_bytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < args.steps; ++step) {
    // Backward: last layer first; a bucket is launched as soon as it holds bucket_elems.
    struct Bucket {
      std::vector<float> data;
      std::vector<std::size_t> layers;
      std::unique_ptr<commkit::Work> work;
    };
    std::vector<Bucket> buckets(1);
    for (std::size_t l = layer_sizes.size(); l-- > 0;) {
      for (std::size_t i = 0; i < layer_sizes[l]; ++i) grads[l][i] = Gradient(rank, step, l, i);
      Bucket& b = buckets.back();
      b.data.insert(b.data.end(), grads[l].begin(), grads[l].end());
      b.layers.push_back(l);
      if (b.data.size() >= bucket_elems || l == 0) {
        auto work = pg.Allreduce(nullptr, b.data.data(), b.data.size(), commkit::DataType::kFloat32,
                                 commkit::ReduceOp::Avg());
        if (!work.ok()) {
          std::fprintf(stderr, "ddp_allreduce: rank %d: %s\n", rank, work.status().ToString().c_str());
          return 1;
        }
        b.work = std::move(work).value();
        total_bytes += static_cast<double>(b.data.size() * sizeof(float));
        if (l != 0) buckets.emplace_back();
      }
    }
    // Wait, unpack, check against the locally computable average, update.
    for (auto& b : buckets) {
      if (!b.work) continue;
      commkit::Status s = b.work->Wait();
      if (!s.ok()) {
        std::fprintf(stderr, "ddp_allreduce: rank %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
      std::size_t offset = 0;
      for (std::size_t l : b.layers) {
        for (std::size_t i = 0; i < layer_sizes[l]; ++i) {
          float avg = b.data[offset + i];
          if (i % 4099 == 0) {
            double want = 0;
            for (int r = 0; r < size; ++r) want += Gradient(r, step, l, i);
            want /= size;
            if (std::fabs(avg - want) > 1e-6 * std::max(1.0, std::fabs(want))) {
              std::fprintf(stderr, "ddp_allreduce: rank %d: step %d layer %zu element %zu: got %g, want %g\n", rank,
                           step, l, i, avg, want);
              return 1;
            }
          }
          weights[l][i] -= 0.1f * avg;
        }
        offset += layer_sizes[l];
      }
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // All ranks must hold identical weights: compare a checksum with MAX and MIN.
  double checksum = 0;
  for (auto& w : weights)
    for (std::size_t i = 0; i < w.size(); i += 97) checksum += w[i];
  double hi = checksum, lo = -checksum;
  auto w1 = pg.Allreduce(nullptr, &hi, 1, commkit::DataType::kFloat64, commkit::ReduceOp::Max());
  auto w2 = pg.Allreduce(nullptr, &lo, 1, commkit::DataType::kFloat64, commkit::ReduceOp::Max());
  if (!w1.ok() || !w2.ok() || !(*w1)->Wait().ok() || !(*w2)->Wait().ok()) return 1;
  if (hi != -lo) {
    std::fprintf(stderr, "ddp_allreduce: rank %d: weights diverged across ranks (%.9g vs %.9g)\n", rank, hi, -lo);
    return 1;
  }
  if (rank == 0)
    std::printf("ddp_allreduce: %d ranks on %s, %d steps, %.1f MB of gradients all-reduced per rank in %.2f s "
                "(%.0f MB/s); weights identical on every rank (checksum %.6f)\n",
                size, std::string(pg.backend_name()).c_str(), args.steps, total_bytes / 1e6, seconds,
                total_bytes / 1e6 / seconds, checksum);
  return 0;
}
