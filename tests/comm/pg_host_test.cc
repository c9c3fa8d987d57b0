// The host backend (commkit's shared-memory engine): the conformance suite with ranks as threads and
// as forked processes, plus what this backend promises on its own: mismatches found in its own rounds
// (no extra exchange), consistent alltoallv checks, send/recv ordering errors that lose nothing, a
// dead peer named within a fraction of the timeout, and a clear error when /dev/shm is too small.
#include <fcntl.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "commkit/comm/hash_store.h"
#include "commkit/comm/registry.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "commkit/common/shm_segment.h"
#include "commkit/common/strings.h"
#include "pg_conformance.h"
#include "shm/single_copy.h"

namespace commkit::testing {
namespace {

using namespace std::chrono_literals;

INSTANTIATE_TEST_SUITE_P(Host, PgConformance, ::testing::Combine(::testing::Values("host"), ::testing::Range(1, 5)),
                         PgParamName);
INSTANTIATE_TEST_SUITE_P(HostFork, PgConformance,
                         ::testing::Combine(::testing::Values("host+fork"), ::testing::Values(2, 3)), PgParamName);
#if COMMKIT_HAVE_UCX
// Ranks on two pretend hosts: shared memory within each, UCX between them (hierarchical all-reduce
// when a host has several ranks, the flat ring otherwise).
INSTANTIATE_TEST_SUITE_P(HostTwoHosts, PgConformance,
                         ::testing::Combine(::testing::Values("host+fork@2"), ::testing::Values(2, 3, 4)), PgParamName);
// Five ranks on four pretend hosts (2+1+1+1): hierarchical all-reduce with halving-doubling among the
// four leaders. Run by its own CTest entries (comm_pg_host_four_hosts*), not by comm_pg_host_test.
INSTANTIATE_TEST_SUITE_P(HostFourHosts, PgConformance,
                         ::testing::Combine(::testing::Values("host+fork@4"), ::testing::Values(5)), PgParamName);
#endif

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    out.push_back(entry.path().filename().string());
  return out;
}

TEST(HostBackend, AutoPicksTheHostBackendOnOneHost) {
  RunRanks("auto", 2, [](ProcessGroup& pg) { EXPECT_EQ(pg.backend_name(), "host"); });
}

// The sliced reduction (a reduce-scatter and an all-gather through the slots) chunk by chunk: 64 KiB
// slots make the sizes below span several chunks, the last one short, so slices are uneven and some
// are empty at 3 ranks; every op (AVG and PREMUL_SUM scale and divide inside it), every reduce root,
// in place and out of place, and the sliced path forced down to one element. Outputs written with
// regular stores and streamed (StreamingCopy, forced for every size by a one-byte cache).
TEST(HostBackend, SlicedReductionsAreExactForEveryOpRootAndPlacement) {
  ScopedEnv slot("COMMKIT_HOST_SLOT_BYTES", "65536");
  ScopedEnv tune("COMMKIT_TUNE", "host.allreduce:*:sliced,host.reduce:*:sliced");
  for (const char* stream : {"0", "1"}) {
    for (int ranks : {2, 3}) {
      ScopedEnv streaming("COMMKIT_HOST_STREAM_BYTES", stream);
      RunRanks("host", ranks, [&](ProcessGroup& pg) {
        for (DataType t : {DataType::kFloat32, DataType::kInt32, DataType::kBFloat16}) {
          const std::vector<ReduceOp> ops = OpsFor(t);
          for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{(3 << 14) + 5}}) {
            for (std::size_t k = 0; k < ops.size(); ++k) {
              const ReduceOp op = ops[k];
              for (bool in_place : {false, true}) {
                for (int root = -1; root < pg.size(); ++root) {
                  Buffer in(t, n), out(t, n);
                  for (std::size_t i = 0; i < n; ++i) in.set(i, Value(pg.rank(), i, op.kind));
                  void* dst = in_place ? in.data() : out.data();
                  const void* src = in_place ? nullptr : in.data();
                  if (root < 0) {
                    COMMKIT_WAIT_OK(pg.Allreduce(src, dst, n, t, op));
                  } else {
                    COMMKIT_WAIT_OK(pg.Reduce(in_place ? in.data() : src, dst, n, t, op, root));
                  }
                  if (root >= 0 && pg.rank() != root) continue;
                  const Buffer& res = in_place ? in : out;
                  for (std::size_t i = 0; i < n; ++i) {
                    const double want = Reference(t, op, pg.size(), i);
                    ASSERT_NEAR(res.at(i), want, Tolerance(t, want))
                        << ToString(t) << " " << op.ToString() << " n=" << n << " i=" << i << " root " << root
                        << (in_place ? " in place" : "") << " ranks " << pg.size() << " streamed " << stream;
                  }
                }
              }
            }
          }
        }
      });
    }
  }
}

// The conformance suite's back-to-back calls of changing sizes (BackToBackChangingSizes: rounds
// that rotate in the slots, every collective) once more with every output streamed (all-gather and
// all-reduce: StreamingCopy), at 2 and 3 ranks.
TEST(HostBackend, RotatingSlotOffsetsKeepEveryCallExactWithStreamedOutputs) {
  ScopedEnv streaming("COMMKIT_HOST_STREAM_BYTES", "1");
  for (int ranks : {2, 3}) RunRanks("host", ranks, BackToBackChangingSizes);
}

// Reduce-scatter in pieces: with 64 KiB slots a block of 3 * 2^13 + 5 f32 takes several rounds, the
// last one short; blocks of different sizes (v) end in different rounds, one is empty; every op, the
// output separate from the input or inside it at this rank's block (nccl-tests' in-place form).
TEST(HostBackend, ReduceScatterInPiecesIsExactForEveryOpAndPlacement) {
  ScopedEnv slot("COMMKIT_HOST_SLOT_BYTES", "65536");
  for (int ranks : {2, 3}) {
    RunRanks("host", ranks, [&](ProcessGroup& pg) {
      const int p = pg.size(), me = pg.rank();
      for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
        for (ReduceOp op : OpsFor(t)) {
          for (bool v : {false, true}) {
            std::vector<std::size_t> counts(p, (3 << 13) + 5);
            if (v)
              for (int q = 0; q < p; ++q) counts[q] = q == 1 ? 0 : static_cast<std::size_t>(q + 1) * 7001;
            std::vector<std::size_t> off(p + 1, 0);
            for (int q = 0; q < p; ++q) off[q + 1] = off[q] + counts[q];
            for (bool inside : {false, true}) {
              Buffer in(t, off[p]), out(t, counts[me]);
              for (std::size_t i = 0; i < off[p]; ++i) in.set(i, Value(me, i, op.kind));
              void* dst = inside ? static_cast<std::uint8_t*>(in.data()) + off[me] * SizeOf(t) : out.data();
              if (v) {
                COMMKIT_WAIT_OK(pg.ReduceScatterV(in.data(), dst, counts, t, op));
              } else {
                COMMKIT_WAIT_OK(pg.ReduceScatter(in.data(), dst, counts[0], t, op));
              }
              for (std::size_t i = 0; i < counts[me]; ++i) {
                const double want = Reference(t, op, p, off[me] + i);
                const double got = inside ? in.at(off[me] + i) : out.at(i);
                ASSERT_NEAR(got, want, Tolerance(t, want))
                    << ToString(t) << " " << op.ToString() << " i=" << i << (v ? " v" : "") << (inside ? " inside" : "")
                    << " ranks " << p;
              }
            }
          }
        }
      }
    });
  }
}

// The single-copy all-gather (each rank reads its peers' inputs where they are), forced for every size:
// equal and uneven blocks (one empty, one of an odd byte count), in place and not, gather to every root,
// and calls whose values change, so a block read before its owner wrote it, or from the wrong rank, shows.
// Runs `body` (which counts its calls) with `tune` forcing single-copy, ranks as threads (memcpy) and as
// processes (process_vm_readv), 2 and 3 of them; the run counter proves the path ran.
void ForcedSingleCopy(const char* tune, const std::function<void(ProcessGroup&, const char* spec, int& calls)>& body) {
  ScopedEnv env("COMMKIT_TUNE", tune);
  for (const char* spec : {"host", "host+fork"}) {
    for (int ranks : {2, 3}) {
      RunRanks(spec, ranks, [&](ProcessGroup& pg) {
        const std::uint64_t ran_before = tune::RunCount("host", CollectiveAlgorithm::kSingleCopy);
        int calls = 0;
        body(pg, spec, calls);
        // Threads share the counter: every rank's calls count in it.
        EXPECT_GE(tune::RunCount("host", CollectiveAlgorithm::kSingleCopy) - ran_before,
                  static_cast<std::uint64_t>(calls));
      });
    }
  }
}

TEST(HostBackend, SingleCopyAllgatherIsExactForEveryShapeAndPlacement) {
  ForcedSingleCopy("host.allgather:*:single_copy", [](ProcessGroup& pg, const char* spec, int& calls) {
    const int p = pg.size(), me = pg.rank();
    for (int call = 0; call < 3; ++call) {
      for (std::size_t n : {std::size_t{1}, std::size_t{4099}, std::size_t{300000}}) {
        for (bool v : {false, true}) {
          std::vector<std::size_t> counts(p, n);
          if (v)
            for (int q = 0; q < p; ++q) counts[q] = q == 1 ? 0 : n + static_cast<std::size_t>(q) * 3;
          std::vector<std::size_t> off(p + 1, 0);
          for (int q = 0; q < p; ++q) off[q + 1] = off[q] + counts[q];
          auto value = [&](int q, std::size_t i) { return static_cast<std::uint8_t>(q * 31 + i * 7 + call); };
          for (bool in_place : {false, true}) {
            std::vector<std::uint8_t> mine(counts[me]), all(off[p], 0xEE);
            for (std::size_t i = 0; i < counts[me]; ++i) mine[i] = value(me, i);
            if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(off[me]));
            const void* send = in_place ? all.data() + off[me] : mine.data();
            if (v) {
              COMMKIT_WAIT_OK(pg.Allgatherv(send, all.data(), counts, DataType::kUInt8));
            } else {
              COMMKIT_WAIT_OK(pg.Allgather(send, all.data(), n, DataType::kUInt8));
            }
            ++calls;
            for (int q = 0; q < p; ++q)
              for (std::size_t i = 0; i < counts[q]; ++i)
                ASSERT_EQ(all[off[q] + i], value(q, i))
                    << "block " << q << " i=" << i << " n=" << n << (v ? " v" : "") << (in_place ? " in place" : "")
                    << " call " << call << " ranks " << p << " " << spec;
          }
        }
        for (int root = 0; root < p; ++root) {
          std::vector<float> mine(n), all(n * static_cast<std::size_t>(p), -1.0f);
          for (std::size_t i = 0; i < n; ++i)
            mine[i] = static_cast<float>(me * 1000 + static_cast<int>(i % 251) + call);
          COMMKIT_WAIT_OK(pg.Gather(mine.data(), all.data(), n, DataType::kFloat32, root));
          ++calls;
          if (me != root) continue;
          for (int q = 0; q < p; ++q)
            for (std::size_t i = 0; i < n; ++i)
              ASSERT_EQ(all[static_cast<std::size_t>(q) * n + i],
                        static_cast<float>(q * 1000 + static_cast<int>(i % 251) + call))
                  << "gather to " << root << " block " << q << " i=" << i << " ranks " << p << " " << spec;
        }
      }
    }
  });
}

// The single-copy broadcast (every other rank reads the root's buffer where it is), forced for every
// size: every root, values that change from call to call (a read before the root wrote, or after it
// returned and wrote again, shows), and an empty broadcast.
TEST(HostBackend, SingleCopyBroadcastIsExactFromEveryRoot) {
  ForcedSingleCopy("host.broadcast:*:single_copy", [](ProcessGroup& pg, const char* spec, int& calls) {
    const int p = pg.size(), me = pg.rank();
    for (int call = 0; call < 3; ++call) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{300000}}) {
        for (int root = 0; root < p; ++root) {
          auto value = [&](std::size_t i) {
            return static_cast<std::int32_t>(root * 100003 + static_cast<int>(i) * 7 + call);
          };
          std::vector<std::int32_t> buf(n, -1);
          if (me == root)
            for (std::size_t i = 0; i < n; ++i) buf[i] = value(i);
          COMMKIT_WAIT_OK(pg.Broadcast(buf.data(), n, DataType::kInt32, root));
          calls += n > 0 ? 1 : 0;
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(buf[i], value(i)) << "root " << root << " i=" << i << " n=" << n << " call " << call << " ranks "
                                        << p << " " << spec;
          if (me == root) std::fill(buf.begin(), buf.end(), -2);  // the root reuses its buffer at once
        }
      }
    }
  });
}

// Whether the ranks may read each other is agreed at creation: a peer whose announced memory cannot be
// read (no such process) or holds another value (another pid namespace) turns single-copy off on
// every rank, with the reason.
TEST(HostBackend, SingleCopyIsOffWhenAPeerCannotBeRead) {
  for (const std::string peer : {"2147483646 4096 77", "self-with-wrong-token", "garbage"}) {
    std::string announced;
    comm::ShmExchange exchange = [&](std::string_view step,
                                     const std::string& mine) -> Result<std::vector<std::string>> {
      if (step == "single-copy-read") return std::vector<std::string>{mine, "ok"};
      const std::vector<std::string> f = Split(mine, ' ');
      announced = mine;
      std::string other = peer;
      if (peer == "self-with-wrong-token") other = StrCat(f[0], " ", f[1], " ", *ParseInt(f[2]) ^ 1);
      return std::vector<std::string>{mine, other};
    };
    std::string why;
    auto possible = comm::SingleCopyPossible(exchange, 0, &why);
    ASSERT_TRUE(possible.ok()) << possible.status().ToString();
    EXPECT_FALSE(*possible) << peer;
    EXPECT_TRUE(Contains(why, "rank 0: ")) << why;  // rank 0 is the one that could not read
    EXPECT_TRUE(Contains(why, peer == "garbage"                 ? "announced 'garbage'"
                              : peer == "self-with-wrong-token" ? "another process"
                                                                : "process_vm_readv"))
        << peer << ": " << why;
  }
  // Two ranks of one process read each other.
  comm::ShmExchange same = [](std::string_view, const std::string& mine) -> Result<std::vector<std::string>> {
    return std::vector<std::string>{mine, mine};
  };
  auto possible = comm::SingleCopyPossible(same, 1, nullptr);
  ASSERT_TRUE(possible.ok()) << possible.status().ToString();
  EXPECT_TRUE(*possible);
}

TEST(HostBackend, MismatchedCountsAreReportedOnEveryRankAndTheGroupStaysUsable) {
  RunRanks("host", 3, [](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    std::size_t count = pg.rank() == 1 ? 5 : 4;
    auto work = pg.Allreduce(nullptr, buf.data(), count, DataType::kFloat32, ReduceOp::Sum(), {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 1: allreduce f32 sum count=5")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 0: allreduce f32 sum count=4")) << s.ToString();
    // Every rank finished the failed round: the next collective works.
    std::vector<float> ok(3, 1.0f);
    COMMKIT_WAIT_OK(pg.Allreduce(nullptr, ok.data(), ok.size(), DataType::kFloat32, ReduceOp::Sum()));
    EXPECT_EQ(ok[2], 3.0f);
  });
}

TEST(HostBackend, DifferentCollectivesAtTheSameStepAreAMismatch) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<std::int32_t> buf(4, pg.rank());
    auto work = pg.rank() == 0
                    ? pg.Broadcast(buf.data(), 4, DataType::kInt32, 0, {.timeout = 20s})
                    : pg.Allreduce(nullptr, buf.data(), 4, DataType::kInt32, ReduceOp::Max(), {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "broadcast")) << s.ToString();
  });
}

TEST(HostBackend, InconsistentAlltoallvCountsFailOnEveryRank) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<std::int32_t> send(8, pg.rank()), recv(8, -1);
    // Rank 0 sends 3 to rank 1, but rank 1 expects 2 from rank 0.
    std::vector<std::size_t> sc = pg.rank() == 0 ? std::vector<std::size_t>{1, 3} : std::vector<std::size_t>{2, 2};
    std::vector<std::size_t> rc = pg.rank() == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{2, 2};
    auto work = pg.Alltoallv(send.data(), sc, recv.data(), rc, DataType::kInt32, {.timeout = 20s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 0 sends 3 elements to rank 1, which expects 2")) << s.ToString();
    COMMKIT_WAIT_OK(pg.Barrier());
  });
}

TEST(HostBackend, ARecvWithTheWrongTagFailsAndTheMessageWaitsForTheRightOne) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<std::int64_t> data(100, 7);
    if (pg.rank() == 0) {
      COMMKIT_WAIT_OK(pg.Send(data.data(), data.size(), DataType::kInt64, 1, /*tag=*/1));
    } else {
      std::vector<std::int64_t> in(100, 0);
      auto wrong = pg.Recv(in.data(), in.size(), DataType::kInt64, 0, /*tag=*/2, {.timeout = 20s});
      ASSERT_TRUE(wrong.ok());
      Status s = (*wrong)->Wait(30s);
      EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
      EXPECT_TRUE(Contains(s.message(), "has tag 1 and 800 bytes, but this recv expects tag 2")) << s.ToString();
      COMMKIT_WAIT_OK(pg.Recv(in.data(), in.size(), DataType::kInt64, 0, /*tag=*/1));
      EXPECT_EQ(in[99], 7);
    }
  });
}

TEST(HostBackend, LargeSendRecvStreamsThroughTheRing) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<std::uint8_t> buf(3 * 1024 * 1024 + 5);
    if (pg.rank() == 0) {
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::uint8_t>(i * 7);
      COMMKIT_WAIT_OK(pg.Send(buf.data(), buf.size(), DataType::kUInt8, 1));
    } else {
      COMMKIT_WAIT_OK(pg.Recv(buf.data(), buf.size(), DataType::kUInt8, 0));
      for (std::size_t i = 0; i < buf.size(); i += 4099) ASSERT_EQ(buf[i], static_cast<std::uint8_t>(i * 7)) << i;
      ASSERT_EQ(buf.back(), static_cast<std::uint8_t>((buf.size() - 1) * 7));
    }
  });
}

TEST(HostBackend, ALateRankTimesOutWithItsName) {
  RunRanks("host", 2, [](ProcessGroup& pg) {
    std::vector<float> buf(4, 1.0f);
    if (pg.rank() == 1) std::this_thread::sleep_for(4s);
    auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 1s});
    ASSERT_TRUE(work.ok());
    Status s = (*work)->Wait(30s);
    if (pg.rank() == 0) {
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
      EXPECT_TRUE(Contains(s.message(), "waiting for rank 1 to arrive")) << s.ToString();
    }
  });
}

TEST(HostBackend, ADeadRankIsNamedLongBeforeTheTimeout) {
  auto codes = ForkRanks("host", 3, [](ProcessGroup& pg) {
    std::vector<float> buf(1024, 1.0f);
    COMMKIT_EXPECT_OK((*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
    if (pg.rank() == 2) std::raise(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    auto work = pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 60s});
    EXPECT_TRUE(work.ok());
    if (!work.ok()) return 1;
    Status s = (*work)->Wait(120s);
    EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank 2 (pid ")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "exited")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "allreduce #2")) << s.ToString();
    // Bounded by the liveness check and the heartbeat diagnosis, not by the 60 s timeout.
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << s.ToString();
    // The group is unusable now, and says so instead of hanging.
    auto next = pg.Barrier({.timeout = 5s});
    EXPECT_TRUE(next.ok());
    if (next.ok()) {
      EXPECT_FALSE((*next)->Wait(30s).ok());
    }
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], -SIGKILL);
}

#if COMMKIT_HAVE_UCX
TEST(HostBackend, ADeadRankOnAnotherHostIsNamed) {
  // Ranks 0,1 on one pretend host, 2,3 on another; rank 3 dies between two all-reduces.
  auto codes = ForkRanks(
      "host", 4,
      [](ProcessGroup& pg) {
        std::vector<float> buf(4096, 1.0f);
        COMMKIT_EXPECT_OK(
            (*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
        EXPECT_EQ(buf[0], 4.0f);
        if (pg.rank() == 3) std::raise(SIGKILL);
        auto start = std::chrono::steady_clock::now();
        auto work =
            pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum(), {.timeout = 60s});
        EXPECT_TRUE(work.ok());
        if (!work.ok()) return 1;
        Status s = (*work)->Wait(120s);
        EXPECT_FALSE(s.ok());
        EXPECT_TRUE(Contains(s.message(), "allreduce #2")) << s.ToString();
        EXPECT_TRUE(Contains(s.message(), "3 (")) << s.ToString();  // named among the missing or silent ranks
        EXPECT_LT(std::chrono::steady_clock::now() - start, 45s) << s.ToString();
        if (pg.rank() == 0) std::fprintf(stderr, "rank 0 got: %s\n", s.ToString().c_str());
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      {}, std::chrono::seconds(200), /*simulated_hosts=*/2);
  ASSERT_EQ(codes.size(), 4u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_EQ(codes[3], -SIGKILL);
}

// UCX is loaded when a group spans hosts. A rank whose node lacks it fails with what to install, and
// the other ranks fail at once with its reason (not after the timeout), all with Unavailable, so that
// "auto" moves every rank on to the same next backend.
std::vector<int> ForkTwoHostsWithoutUcxOnRank3(const std::string& backend,
                                               const std::function<int(ProcessGroup&)>& body, std::string& stderr_text,
                                               std::chrono::nanoseconds& took) {
  testing::TempDir dir;
  const std::string log = (dir.path() / "ranks.log").string();
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || saved < 0) {
    ADD_FAILURE() << "cannot redirect stderr to " << log;
    return {};
  }
  ::dup2(fd, 2);
  ::close(fd);
  const auto start = std::chrono::steady_clock::now();
  ProcessGroupOptions options;
  options.timeout = 60s;
  auto codes = ForkRanks(backend, 4, body, options, 120s, /*simulated_hosts=*/2, [](int rank) {
    if (rank == 3) ::setenv("COMMKIT_LIBUCP", "/nonexistent/libucp.so.0", 1);
  });
  took = std::chrono::steady_clock::now() - start;
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(log);
  stderr_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return codes;
}

TEST(HostBackend, ARankWithoutUcxFailsTheGroupAtOnceWithItsReason) {
  std::string text;
  std::chrono::nanoseconds took{};
  auto codes = ForkTwoHostsWithoutUcxOnRank3(
      "host", [](ProcessGroup&) { return 0; }, text, took);
  ASSERT_EQ(codes.size(), 4u) << text;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 91) << "rank " << r << " should fail to create the group\n" << text;
  EXPECT_LT(took, 30s) << "the ranks waited for the timeout instead of failing together\n" << text;
  EXPECT_TRUE(Contains(text,
                       "host backend (UCX), rank 3/4 of world: libucp.so.0 not available (COMMKIT_LIBUCP="
                       "/nonexistent/libucp.so.0)"))
      << text;
  EXPECT_TRUE(Contains(text, "install UCX")) << text;
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(Contains(text, StrCat("rank ", r, ": Unavailable: "))) << text;
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(Contains(text, StrCat("host backend (UCX), rank ", r,
                                      "/4 of world: rank 3 could not start UCX: "
                                      "libucp.so.0 not available")))
        << text;
}

#if COMMKIT_HAVE_GLOO
TEST(HostBackend, AutoMovesEveryRankToGlooWhenOneNodeLacksUcx) {
  std::string text;
  std::chrono::nanoseconds took{};
  auto codes = ForkTwoHostsWithoutUcxOnRank3(
      "auto",
      [](ProcessGroup& pg) {
        EXPECT_EQ(pg.backend_name(), "gloo");
        std::vector<float> buf(1000, 1.0f);
        COMMKIT_EXPECT_OK(
            (*pg.Allreduce(nullptr, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::Sum()))->Wait());
        EXPECT_EQ(buf[999], 4.0f);
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      text, took);
  ASSERT_EQ(codes.size(), 4u) << text;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << "\n" << text;
  EXPECT_LT(took, 30s) << text;
}
#endif
#endif

TEST(HostBackend, ATooSmallDevShmIsAnErrorWithTheFix) {
  auto free = shm::ShmFreeBytes();
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  auto seg = shm::ShmSegment::Create("/commkit.test.toolarge", static_cast<std::size_t>(*free) + (1ull << 30),
                                     "shrink the host backend's buffers with COMMKIT_HOST_SLOT_BYTES=262144");
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(seg.status().message(), "--shm-size")) << seg.status().ToString();
  EXPECT_TRUE(Contains(seg.status().message(), "COMMKIT_HOST_SLOT_BYTES")) << seg.status().ToString();
}

// The group's own segments (their names are read from this process's mappings while the group is
// up, "/dev/shm/commkit.<token>.<rank> (deleted)") are gone from /dev/shm once it is destroyed; other
// tests' segments, live beside it under ctest -j, are not counted.
TEST(HostBackend, SegmentsLeaveNothingInDevShm) {
  std::set<std::string> ours;  // written by rank 0 only (each rank maps every rank's segment)
  RunRanks("host", 3, [&](ProcessGroup& pg) {
    COMMKIT_WAIT_OK(pg.Barrier());
    if (pg.rank() != 0) return;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      auto at = line.find("/dev/shm/commkit.");
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + std::strlen("/dev/shm/"));
      ours.insert(name.substr(0, name.find(' ')));
    }
  });
  ASSERT_EQ(ours.size(), 3u) << "one segment per rank, mapped while the group is up";
  std::set<std::string> tokens;
  for (const auto& name : ours) tokens.insert(name.substr(0, name.rfind('.') + 1));  // "commkit.<token>."
  ASSERT_EQ(tokens.size(), 1u);
  for (const auto& name : ListDir("/dev/shm"))
    EXPECT_NE(name.rfind(*tokens.begin(), 0), 0u) << "left behind: /dev/shm/" << name;
}

}  // namespace
}  // namespace commkit::testing
