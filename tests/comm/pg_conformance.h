// The process-group conformance suite: written once, instantiated per backend
// (INSTANTIATE_TEST_SUITE_P(Gloo, PgConformance, Combine(Values("gloo"), Range(1, 5)))). Ranks run
// as threads; every collective x dtype x op x sizes (0, 1, odd, > 1 MiB for all-reduce and broadcast,
// 64K elements per rank for allgather, reduce_scatter and alltoall) against an independent reference,
// in place and out of place, every root of the rooted collectives, and split groups. There is no
// in-place reduce_scatter: backend.h defines none (MPI and NCCL disagree on where the result goes).
#pragma once

#include <cctype>
#include <numeric>
#include <tuple>

#include "commkit/comm/registry.h"
#include "pg_harness.h"
#include "test_support.h"

namespace commkit::testing {

using PgParam = std::tuple<std::string, int>;  // backend, ranks

class PgConformance : public ::testing::TestWithParam<PgParam> {
 protected:
  // A backend this build knows but cannot run here (NCCL without a GPU) is skipped with its reason.
  void SetUp() override {
    std::string name = backend().substr(0, backend().find_first_of("+@"));
    for (const auto& b : Registry::Default().List())
      if (b.name == name && !b.available) GTEST_SKIP() << "backend " << name << " is unavailable: " << b.reason;
  }
  std::string backend() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
  static constexpr std::size_t kBig = (1 << 20) / 4 + 3;  // > 1 MiB of f32, odd
  static constexpr std::size_t kLarge = 1 << 16;          // per-rank block of the larger gather-type cases
};

inline std::string PgParamName(const ::testing::TestParamInfo<PgParam>& info) {
  std::string name = std::get<0>(info.param);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';  // "gloo+fork" -> "gloo_fork"
  return name + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt8,    DataType::kUInt8,   DataType::kInt32,   DataType::kInt64};

inline std::vector<ReduceOp> OpsFor(DataType t) {
  std::vector<ReduceOp> ops = {ReduceOp::Sum(), ReduceOp::Prod(), ReduceOp::Min(), ReduceOp::Max(), ReduceOp::Avg(),
                               ReduceOp::PreMulSum(2.0)};
  if (!IsFloatingPoint(t)) {
    ops.push_back(ReduceOp::Band());
    ops.push_back(ReduceOp::Bor());
    ops.push_back(ReduceOp::Bxor());
  }
  return ops;
}

TEST_P(PgConformance, AllreduceEveryTypeOpAndSize) {
  RunRanks(backend(), ranks(), [&](ProcessGroup& pg) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : OpsFor(t)) {
        if (!pg.Supports(CollectiveKind::kAllreduce, t, pg.memory(), op)) continue;
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
          for (bool in_place : {false, true}) {
            Buffer in(t, n), out(t, n);
            for (std::size_t i = 0; i < n; ++i) in.set(i, Value(pg.rank(), i, op.kind));
            void* dst = in_place ? in.data() : out.data();
            COMMKIT_WAIT_OK(pg.Allreduce(in_place ? nullptr : in.data(), dst, n, t, op));
            Buffer& res = in_place ? in : out;
            for (std::size_t i = 0; i < n; ++i) {
              double want = Reference(t, op, pg.size(), i);
              ASSERT_NEAR(res.at(i), want, Tolerance(t, want))
                  << ToString(t) << " " << op.ToString() << " n=" << n << " i=" << i << (in_place ? " in place" : "");
            }
          }
        }
      }
    }
    // Over 1 MiB, once per type.
    for (DataType t : kAllTypes) {
      Buffer big(t, kBig);
      for (std::size_t i = 0; i < kBig; ++i) big.set(i, Value(pg.rank(), i, ReduceKind::kMax));
      COMMKIT_WAIT_OK(pg.Allreduce(nullptr, big.data(), kBig, t, ReduceOp::Max()));
      for (std::size_t i = 0; i < kBig; i += 997) ASSERT_EQ(big.at(i), Reference(t, ReduceOp::Max(), pg.size(), i));
    }
  });
}

TEST_P(PgConformance, BroadcastReduceFromEveryRoot) {
  RunRanks(backend(), ranks(), [&](ProcessGroup& pg) {
    for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16, DataType::kUInt8}) {
      for (int root = 0; root < pg.size(); ++root) {
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, kBig}) {
          Buffer b(t, n);
          for (std::size_t i = 0; i < n; ++i) b.set(i, pg.rank() == root ? Value(root, i, ReduceKind::kSum) : 0);
          COMMKIT_WAIT_OK(pg.Broadcast(b.data(), n, t, root));
          for (std::size_t i = 0; i < n; i += (n > 100 ? 991 : 1)) ASSERT_EQ(b.at(i), Value(root, i, ReduceKind::kSum));
        }
      }
      // Reduce with every op of the type, each once: op k at root k % p, out of place for the first p
      // ops and in place (send == recv on every rank) for the next p, and so on, so every root and
      // both placements are covered without multiplying ops x roots.
      const std::vector<ReduceOp> ops = OpsFor(t);
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const ReduceOp op = ops[k];
        if (!pg.Supports(CollectiveKind::kReduce, t, pg.memory(), op)) continue;
        const int root = static_cast<int>(k % static_cast<std::size_t>(pg.size()));
        const bool in_place = (k / static_cast<std::size_t>(pg.size())) % 2 == 1;
        Buffer in(t, 5), out(t, 5);
        for (std::size_t i = 0; i < 5; ++i) in.set(i, Value(pg.rank(), i, op.kind));
        COMMKIT_WAIT_OK(pg.Reduce(in.data(), in_place ? in.data() : out.data(), 5, t, op, root));
        if (pg.rank() != root) continue;
        const Buffer& res = in_place ? in : out;
        for (std::size_t i = 0; i < 5; ++i) {
          double want = Reference(t, op, pg.size(), i);
          ASSERT_NEAR(res.at(i), want, Tolerance(t, want))
              << ToString(t) << " " << op.ToString() << " root " << root << (in_place ? " in place" : "");
        }
      }
    }
  });
}

TEST_P(PgConformance, GatherFamilies) {
  RunRanks(backend(), ranks(), [&](ProcessGroup& pg) {
    const int p = pg.size(), me = pg.rank();
    int rotation = 0;  // gather/scatter root: moves on with every (type, size), so each root is covered
    for (DataType t : kAllTypes) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{9}}) {
        // allgather, out of place and in place
        Buffer in(t, n), out(t, n * p);
        for (std::size_t i = 0; i < n; ++i) in.set(i, Value(me, i, ReduceKind::kSum));
        COMMKIT_WAIT_OK(pg.Allgather(in.data(), out.data(), n, t));
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out.at(r * n + i), Value(r, i, ReduceKind::kSum));
        Buffer inplace(t, n * p);
        for (std::size_t i = 0; i < n; ++i) inplace.set(me * n + i, Value(me, i, ReduceKind::kSum));
        COMMKIT_WAIT_OK(pg.Allgather(nullptr, inplace.data(), n, t));
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(inplace.at(r * n + i), Value(r, i, ReduceKind::kSum));
        // gather / scatter; over the 8 types x 3 sizes the root takes every value for every size
        const int root = (p - 1 + rotation++) % p;
        Buffer g(t, n * p);
        COMMKIT_WAIT_OK(pg.Gather(in.data(), g.data(), n, t, root));
        for (int r = 0; me == root && r < p; ++r)
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(g.at(r * n + i), Value(r, i, ReduceKind::kSum));
        Buffer s(t, n);
        COMMKIT_WAIT_OK(pg.Scatter(me == root ? g.data() : nullptr, s.data(), n, t, root));
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(s.at(i), Value(me, i, ReduceKind::kSum));
      }
      // allgatherv with uneven counts (rank r contributes r+1 elements, rank 0 maybe 0)
      std::vector<std::size_t> counts(p);
      for (int r = 0; r < p; ++r) counts[r] = static_cast<std::size_t>(r % 3);
      std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      Buffer vin(t, counts[me]), vout(t, total);
      for (std::size_t i = 0; i < counts[me]; ++i) vin.set(i, Value(me, i, ReduceKind::kSum));
      COMMKIT_WAIT_OK(pg.Allgatherv(vin.data(), vout.data(), counts, t));
      std::size_t off = 0;
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < counts[r]; ++i) ASSERT_EQ(vout.at(off++), Value(r, i, ReduceKind::kSum));
    }
    // allgather, larger: 64K elements per rank, once.
    const std::size_t big = kLarge;
    Buffer in(DataType::kInt32, big), out(DataType::kInt32, big * p);
    for (std::size_t i = 0; i < big; ++i) in.set(i, 1000 * me + static_cast<double>(i % 997));
    COMMKIT_WAIT_OK(pg.Allgather(in.data(), out.data(), big, DataType::kInt32));
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < big; ++i)
        ASSERT_EQ(out.at(r * big + i), 1000 * r + static_cast<double>(i % 997)) << "rank block " << r << " i=" << i;
  });
}

TEST_P(PgConformance, ReduceScatterAndAlltoall) {
  RunRanks(backend(), ranks(), [&](ProcessGroup& pg) {
    const int p = pg.size(), me = pg.rank();
    for (DataType t : kAllTypes) {
      for (ReduceOp op : {ReduceOp::Sum(), ReduceOp::Min(), ReduceOp::Avg()}) {
        // Zero elements once per type (with SUM), three for every op.
        for (std::size_t n : {std::size_t{0}, std::size_t{3}}) {
          if (n == 0 && op.kind != ReduceKind::kSum) continue;
          Buffer in(t, n * p), out(t, n);
          for (std::size_t i = 0; i < n * p; ++i) in.set(i, Value(me, i, op.kind));
          COMMKIT_WAIT_OK(pg.ReduceScatter(in.data(), out.data(), n, t, op));
          for (std::size_t i = 0; i < n; ++i) {
            double want = Reference(t, op, p, me * n + i);
            ASSERT_NEAR(out.at(i), want, Tolerance(t, want)) << ToString(t) << " " << op.ToString() << " n=" << n;
          }
        }
      }
      // reduce_scatter_v
      std::vector<std::size_t> counts(p);
      for (int r = 0; r < p; ++r) counts[r] = static_cast<std::size_t>((r + 1) % 3);
      std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      std::size_t off = std::accumulate(counts.begin(), counts.begin() + me, std::size_t{0});
      Buffer vin(t, total), vout(t, counts[me]);
      for (std::size_t i = 0; i < total; ++i) vin.set(i, Value(me, i, ReduceKind::kSum));
      COMMKIT_WAIT_OK(pg.ReduceScatterV(vin.data(), vout.data(), counts, t, ReduceOp::Sum()));
      for (std::size_t i = 0; i < counts[me]; ++i) ASSERT_EQ(vout.at(i), Reference(t, ReduceOp::Sum(), p, off + i));
      // alltoall: element (to q, i) = 24*me + 4*q + i (at most 113 for i8 up to 5 ranks); 0 and 2 per block
      for (std::size_t n : {std::size_t{0}, std::size_t{2}}) {
        Buffer a(t, n * p), b(t, n * p);
        for (int q = 0; q < p; ++q)
          for (std::size_t i = 0; i < n; ++i) a.set(q * n + i, 24 * me + 4 * q + static_cast<double>(i));
        COMMKIT_WAIT_OK(pg.Alltoall(a.data(), b.data(), n, t));
        for (int q = 0; q < p; ++q)
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b.at(q * n + i), 24 * q + 4 * me + static_cast<double>(i));
      }
      // alltoallv: rank me sends (me + q) % 3 elements to q
      std::vector<std::size_t> sc(p), rc(p);
      for (int q = 0; q < p; ++q) {
        sc[q] = static_cast<std::size_t>((me + q) % 3);
        rc[q] = static_cast<std::size_t>((q + me) % 3);
      }
      Buffer va(t, std::accumulate(sc.begin(), sc.end(), std::size_t{0})),
          vb(t, std::accumulate(rc.begin(), rc.end(), std::size_t{0}));
      std::size_t k = 0;
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < sc[q]; ++i) va.set(k++, 24 * me + 4 * q + static_cast<double>(i));
      COMMKIT_WAIT_OK(pg.Alltoallv(va.data(), sc, vb.data(), rc, t));
      k = 0;
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < rc[q]; ++i) ASSERT_EQ(vb.at(k++), 24 * q + 4 * me + static_cast<double>(i));
    }
    // Larger, once each: reduce_scatter of 64K elements per rank (f32 SUM) and alltoall of 64K per block.
    const std::size_t big = kLarge;
    {
      Buffer in(DataType::kFloat32, big * p), out(DataType::kFloat32, big);
      for (std::size_t i = 0; i < big * p; ++i) in.set(i, Value(me, i, ReduceKind::kSum));
      COMMKIT_WAIT_OK(pg.ReduceScatter(in.data(), out.data(), big, DataType::kFloat32, ReduceOp::Sum()));
      for (std::size_t i = 0; i < big; ++i)
        ASSERT_EQ(out.at(i), Reference(DataType::kFloat32, ReduceOp::Sum(), p, me * big + i)) << "i=" << i;
    }
    {
      Buffer a(DataType::kInt32, big * p), b(DataType::kInt32, big * p);
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < big; ++i) a.set(q * big + i, 1000000 * me + 1000 * q + static_cast<double>(i % 997));
      COMMKIT_WAIT_OK(pg.Alltoall(a.data(), b.data(), big, DataType::kInt32));
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < big; ++i)
          ASSERT_EQ(b.at(q * big + i), 1000000 * q + 1000 * me + static_cast<double>(i % 997)) << "from " << q << " i=" << i;
    }
  });
}

// Back-to-back calls whose sizes cross the backends' internal boundaries: the round's header line
// (48 B), where rounds start rotating in the shared-memory slots (2 KiB on Intel CPUs, 32 KiB
// elsewhere: ShmTransport::RotatedOffset, in the host backend's slots and the mpi and gloo backends'
// meetings alike), the meetings' 16 and 64 KiB, a slot, the flat/sliced and staged/single-copy
// switches. Every call's values differ from every other call's, so data an earlier call left at
// another offset, or a rank that landed on a different offset, shows up as a wrong value.
inline void BackToBackChangingSizes(ProcessGroup& pg) {
  const std::vector<std::size_t> counts = {8,      512,  1000, 3000,  8 << 10, 10 << 10,
                                           1,      25000, 7 << 10, 70000, 16 << 10, 300000};
  const int P = pg.size(), r = pg.rank();
  const auto t = DataType::kInt32;
  for (int call = 0; call < 2 * static_cast<int>(counts.size()); ++call) {
    const std::size_t n = counts[static_cast<std::size_t>(call) % counts.size()];
    Buffer in(t, n), out(t, n);
    for (std::size_t i = 0; i < n; ++i) in.set(i, (r + 1) * 1000 + static_cast<int>(i % 97) + call);
    COMMKIT_WAIT_OK(pg.Allreduce(in.data(), out.data(), n, t, ReduceOp::Sum()));
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(out.at(i), 1000 * P * (P + 1) / 2 + P * (static_cast<int>(i % 97) + call))
          << "allreduce call " << call << " n=" << n << " i=" << i << " ranks " << P;
    const std::size_t m = std::max<std::size_t>(1, n / static_cast<std::size_t>(P));
    Buffer mine(t, m), all(t, m * static_cast<std::size_t>(P));
    for (std::size_t i = 0; i < m; ++i) mine.set(i, r * 7 + static_cast<int>(i % 13) + call);
    COMMKIT_WAIT_OK(pg.Allgather(mine.data(), all.data(), m, t));
    for (int q = 0; q < P; ++q)
      for (std::size_t i = 0; i < m; ++i)
        ASSERT_EQ(all.at(static_cast<std::size_t>(q) * m + i), q * 7 + static_cast<int>(i % 13) + call)
            << "allgather call " << call << " block " << q << " i=" << i << " ranks " << P;
    // reduce-scatter: block q of rank r's input holds r + q + i % 11 + call.
    Buffer blocks(t, m * static_cast<std::size_t>(P)), part(t, m);
    for (int q = 0; q < P; ++q)
      for (std::size_t i = 0; i < m; ++i)
        blocks.set(static_cast<std::size_t>(q) * m + i, r + q + static_cast<int>(i % 11) + call);
    COMMKIT_WAIT_OK(pg.ReduceScatter(blocks.data(), part.data(), m, t, ReduceOp::Sum()));
    for (std::size_t i = 0; i < m; ++i)
      ASSERT_EQ(part.at(i), P * (P - 1) / 2 + P * (r + static_cast<int>(i % 11) + call))
          << "reduce_scatter call " << call << " i=" << i << " ranks " << P;
    const int root = call % P;
    Buffer b(t, n);
    for (std::size_t i = 0; i < n; ++i) b.set(i, r == root ? root * 5 + static_cast<int>(i % 11) + call : -1);
    COMMKIT_WAIT_OK(pg.Broadcast(b.data(), n, t, root));
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(b.at(i), root * 5 + static_cast<int>(i % 11) + call)
          << "broadcast call " << call << " n=" << n << " i=" << i << " root " << root << " ranks " << P;
  }
}

TEST_P(PgConformance, BackToBackCallsOfChangingSizesStayExact) { RunRanks(backend(), ranks(), BackToBackChangingSizes); }

TEST_P(PgConformance, BarrierSendRecvAndSplit) {
  RunRanks(backend(), ranks(), [&](ProcessGroup& pg) {
    const int p = pg.size(), me = pg.rank();
    COMMKIT_WAIT_OK(pg.Barrier());
    if (p > 1) {
      // A ring: send to the right, receive from the left; even ranks send first to avoid ordering deadlocks.
      Buffer out(DataType::kInt32, 1000), in(DataType::kInt32, 1000);
      for (std::size_t i = 0; i < 1000; ++i) {
        out.set(i, me);
        in.set(i, -1);
      }
      int right = (me + 1) % p, left = (me + p - 1) % p;
      if (me % 2 == 0) {
        COMMKIT_WAIT_OK(pg.Send(out.data(), 1000, DataType::kInt32, right, 7));
        COMMKIT_WAIT_OK(pg.Recv(in.data(), 1000, DataType::kInt32, left, 7));
      } else {
        COMMKIT_WAIT_OK(pg.Recv(in.data(), 1000, DataType::kInt32, left, 7));
        COMMKIT_WAIT_OK(pg.Send(out.data(), 1000, DataType::kInt32, right, 7));
      }
      ASSERT_EQ(in.at(0), left);
      ASSERT_EQ(in.at(999), left);
    }
    // Split into even and odd ranks, ordered by descending key; allreduce within each.
    auto sub = pg.Split(me % 2, -me);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    ASSERT_TRUE(*sub);
    int members = (p - me % 2 + 1) / 2;
    ASSERT_EQ((*sub)->size(), members);
    Buffer v(DataType::kInt64, 1);
    v.set(0, me);
    std::int64_t sum = 0;
    for (int r = me % 2; r < p; r += 2) sum += r;
    COMMKIT_WAIT_OK((*sub)->Allreduce(nullptr, v.data(), 1, DataType::kInt64, ReduceOp::Sum()));
    ASSERT_EQ(v.at(0), sum);
    // Highest key first: the largest original rank of the color is sub-rank 0.
    int highest = (p - 1) - ((p - 1 - me % 2) % 2);
    Buffer first(DataType::kInt64, 1);
    first.set(0, me == highest ? 42 : 0);
    COMMKIT_WAIT_OK((*sub)->Broadcast(first.data(), 1, DataType::kInt64, 0));
    ASSERT_EQ(first.at(0), 42);
    auto none = pg.Split(me == 0 ? -1 : 1, 0);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    ASSERT_EQ(*none == nullptr, me == 0);
  });
}

}  // namespace commkit::testing
