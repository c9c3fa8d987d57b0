// Deterministic per-rank input patterns and the expected outputs of every benchmarked collective.
#include <algorithm>
#include <cmath>

#include "commkit/bench/runner.h"

namespace commkit::bench {
namespace {

bool IsProduct(const BenchOptions& o) { return o.op.kind == ReduceKind::kProd; }

// Products use {1, 2} so that they stay exact (powers of two); the rest {1..4}.
double Input(const BenchOptions& o, int rank, std::size_t i, unsigned salt) {
  const double v = PatternValue(rank, i, salt);
  return IsProduct(o) ? 1.0 + std::fmod(v, 2.0) : v;
}

double Reduced(const BenchOptions& o, int nranks, std::size_t i, unsigned salt) {
  double acc = Input(o, 0, i, salt);
  for (int k = 1; k < nranks; ++k) {
    const double v = Input(o, k, i, salt);
    switch (o.op.kind) {
      case ReduceKind::kProd: acc *= v; break;
      case ReduceKind::kMin: acc = std::min(acc, v); break;
      case ReduceKind::kMax: acc = std::max(acc, v); break;
      default: acc += v; break;
    }
  }
  if (o.op.kind == ReduceKind::kAvg) acc /= nranks;
  return acc;
}

}  // namespace

double InputValue(const BenchOptions& options, int rank, std::size_t i, unsigned salt) {
  return Input(options, rank, i, salt);
}

double PatternValue(int rank, std::size_t i, unsigned salt) {
  return 1.0 + static_cast<double>((static_cast<std::size_t>(rank) * 7 + i * 3 + salt) % 4);
}

double ExpectedValue(const BenchOptions& o, const BufferCounts& c, int rank, int nranks, std::size_t i,
                     unsigned salt) {
  const std::size_t n = c.count == 0 ? 1 : c.count;
  switch (o.collective) {
    case BenchCollective::kAllreduce:
    case BenchCollective::kReduce:
      return Reduced(o, nranks, i, salt);
    case BenchCollective::kAllgather:
      return Input(o, static_cast<int>(i / n), i % n, salt);
    case BenchCollective::kReduceScatter:
      return Reduced(o, nranks, static_cast<std::size_t>(rank) * c.count + i, salt);
    case BenchCollective::kBroadcast:
      return Input(o, o.root, i, salt);
    case BenchCollective::kAlltoall:
      return Input(o, static_cast<int>(i / n), static_cast<std::size_t>(rank) * c.count + i % n, salt);
    case BenchCollective::kSendRecv:
      return Input(o, (rank - 1 + nranks) % nranks, i, salt);
  }
  return 0;
}

}  // namespace commkit::bench
