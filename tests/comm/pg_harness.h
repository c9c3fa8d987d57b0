// Test harness for process groups: run N ranks as threads on one HashStore, typed buffer helpers
// and an independent reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "commkit/comm/hash_store.h"
#include "commkit/comm/process_group.h"
#include "commkit/comm/reduce_kernels.h"

namespace commkit::testing {

// Runs body(pg) on `size` threads, each with its own ProcessGroup over one HashStore.
inline void RunRanks(const std::string& backend, int size, const std::function<void(ProcessGroup&)>& body,
                     ProcessGroupOptions options = {}) {
  auto store = std::make_shared<HashStore>();
  options.backend = backend;
  if (options.timeout == ProcessGroupOptions{}.timeout) options.timeout = std::chrono::seconds(60);
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

// A typed buffer of n elements.
struct Buffer {
  Buffer(DataType t, std::size_t n) : type(t), count(n), bytes(std::max<std::size_t>(n * SizeOf(t), 1)) {}
  void* data() { return bytes.data(); }
  double at(std::size_t i) const { return Load(type, bytes.data(), i); }
  void set(std::size_t i, double v) { StoreValue(type, bytes.data(), i, v); }
  DataType type;
  std::size_t count;
  std::vector<unsigned char> bytes;
};

}  // namespace commkit::testing
