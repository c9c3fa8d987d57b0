// The selection table (commkit/comm/tuning.h): the COMMKIT_TUNE grammar, precedence of its sources and
// the deprecated variables. The calibration cache and the plan: tune_calibration_test.cc; that a forced
// choice is what the backends run: tune_backends_test.cc.
#include <random>

#include "commkit/comm/tuning.h"
#include "commkit/common/strings.h"
#include "test_support.h"
#include "tune_test_support.h"

namespace commkit::testing {
namespace {

// ---- grammar ----

TEST(TuneSpec, ParsesEveryField) {
  auto rules = tune::ParseSpec(
      " allreduce:0-64K:ring , gloo.allreduce@host:64K-:Halving_Doubling:segment=256K:ranks=2-4:nodes=1:ppn=2- ,"
      "host.reduce:*:sliced");
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  ASSERT_EQ(rules->size(), 3u);
  const tune::Rule& a = (*rules)[0];
  EXPECT_EQ(a.backend, "");
  EXPECT_EQ(a.collective, kAll);
  EXPECT_EQ(a.min_bytes, 0u);
  EXPECT_EQ(a.max_bytes, 65536u);
  EXPECT_EQ(a.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(a.source, Source::kEnv);
  const tune::Rule& b = (*rules)[1];
  EXPECT_EQ(b.backend, "gloo");
  ASSERT_TRUE(b.memory.has_value());
  EXPECT_EQ(*b.memory, kHostMem);
  EXPECT_EQ(b.min_bytes, 65536u);
  EXPECT_EQ(b.max_bytes, tune::kNoLimit);
  EXPECT_EQ(b.algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(b.params.segment_bytes, 256u << 10);
  EXPECT_EQ(b.ranks.min, 2);
  EXPECT_EQ(b.ranks.max, 4);
  EXPECT_EQ(b.nodes.min, 1);
  EXPECT_EQ(b.nodes.max, 1);
  EXPECT_EQ(b.ranks_per_node.min, 2);
  EXPECT_EQ(b.ranks_per_node.max, INT_MAX);
  EXPECT_NE(b.why.find("COMMKIT_TUNE item 2"), std::string::npos) << b.why;
  EXPECT_EQ((*rules)[2].collective, CollectiveKind::kReduce);
  EXPECT_EQ((*rules)[2].max_bytes, tune::kNoLimit);
  // Round trip through the grammar.
  for (const tune::Rule& r : *rules) {
    auto again = tune::ParseSpec(tune::FormatRule(r));
    ASSERT_TRUE(again.ok()) << tune::FormatRule(r) << ": " << again.status().ToString();
    ASSERT_EQ(again->size(), 1u);
    EXPECT_EQ((*again)[0].min_bytes, r.min_bytes);
    EXPECT_EQ((*again)[0].max_bytes, r.max_bytes);
    EXPECT_EQ((*again)[0].algorithm, r.algorithm);
    EXPECT_EQ((*again)[0].params, r.params);
    EXPECT_EQ((*again)[0].ranks, r.ranks);
    EXPECT_EQ((*again)[0].backend, r.backend);
  }
  EXPECT_TRUE(tune::ParseSpec("").ok());
  EXPECT_TRUE(tune::ParseSpec(" , ,").ok());
}

TEST(TuneSpec, Sizes) {
  EXPECT_EQ(tune::ParseBytes("0"), 0u);
  EXPECT_EQ(tune::ParseBytes("4096"), 4096u);
  EXPECT_EQ(tune::ParseBytes("64K"), 65536u);
  EXPECT_EQ(tune::ParseBytes("64KiB"), 65536u);
  EXPECT_EQ(tune::ParseBytes("1mb"), 1u << 20);
  EXPECT_EQ(tune::ParseBytes("2G"), std::size_t{2} << 30);
  EXPECT_FALSE(tune::ParseBytes("").has_value());
  EXPECT_FALSE(tune::ParseBytes("K").has_value());
  EXPECT_FALSE(tune::ParseBytes("-1").has_value());
  EXPECT_FALSE(tune::ParseBytes("1.5K").has_value());
  EXPECT_FALSE(tune::ParseBytes("12X").has_value());
  EXPECT_FALSE(tune::ParseBytes("99999999999999999999").has_value());
  EXPECT_FALSE(tune::ParseBytes("99999999999999999G").has_value());
}

// Every malformed item is InvalidArgument naming the variable, the item, the bad piece and the fix.
TEST(TuneSpec, MalformedItemsSayWhatWhereAndHow) {
  struct Case {
    std::string spec, expect;
  } cases[] = {
      {"allreduce:0-64K:rign", "unknown algorithm 'rign'"},
      {"allreduce:0-64K", "expected at least target:range:algorithm"},
      {"allreduce:64K-64K:ring", "empty size range"},
      {"allreduce:1M-64K:ring", "empty size range"},
      {"allreduce:64:ring", "needs a '-'"},
      {"allreduce:x-1M:ring", "size 'x'"},
      {"allreduce:0-1Q:ring", "size '1Q'"},
      {"nccl.allreduce:*:ring", "unknown backend 'nccl'"},
      {"allreduc:*:ring", "unknown collective 'allreduc'"},
      {"allreduce@gpu:*:ring", "unknown memory kind 'gpu'"},
      {"allreduce:*:ring:speed=3", "unknown parameter 'speed'"},
      {"allreduce:*:ring:segment", "needs key=value"},
      {"allreduce:*:ring:segment=0", "segment='0'"},
      {"allreduce:*:ring:ranks=0", "ranks='0'"},
      {"allreduce:*:ring:ranks=4-2", "ranks='4-2'"},
      {"allreduce:*:hierarchical:between=flat", "between='flat'"},
      {"send:*:ring", "unknown collective 'send'"},
  };
  for (const Case& c : cases) {
    auto r = tune::ParseSpec(StrCat("allreduce:0-8:ring, ", c.spec));
    ASSERT_FALSE(r.ok()) << c.spec;
    const std::string m = r.status().message();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << m;
    EXPECT_NE(m.find("COMMKIT_TUNE item 2"), std::string::npos) << m;
    EXPECT_NE(m.find("at character 21"), std::string::npos) << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.spec << " -> " << m;
    EXPECT_NE(m.find("docs/tuning.md"), std::string::npos) << m;
  }
}

TEST(TuneSpec, HostileInputIsRefusedWithoutCrashing) {
  // Too long, too many items, control bytes and random garbage: an error (or rules), never a crash.
  auto huge = tune::ParseSpec(std::string(1 << 20, 'a'));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("bytes long"), std::string::npos) << huge.status().message();
  std::string many;
  for (int i = 0; i < 300; ++i) many += "allreduce:*:ring,";
  auto lots = tune::ParseSpec(many);
  ASSERT_FALSE(lots.ok());
  EXPECT_NE(lots.status().message().find("more than 256 items"), std::string::npos);
  auto ctrl = tune::ParseSpec(std::string("allreduce:*:\x01\x7f\xff", 15));
  ASSERT_FALSE(ctrl.ok());
  EXPECT_NE(ctrl.status().message().find("\\x01\\x7f\\xff"), std::string::npos) << ctrl.status().message();
  const std::string alphabet = "allreduce:*-,.@=0123456789KMGhostgloompiring_\x01\xff ";
  std::mt19937 rng(16);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 200, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    auto r = tune::ParseSpec(s);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

// ---- the table ----

TEST(TuneTable, DefaultsAreTheBackendsLongStandingChoices) {
  auto host = MustTable("host", {2, 2, 1}, Isolated());
  EXPECT_EQ(host.Select(kAll, kHostMem, 1 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(host.Select(kAll, kHostMem, (1 << 10) + 1).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(host.Select(CollectiveKind::kReduce, kHostMem, 1 << 20).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(host.Select(kAll, kHostMem, 64 << 20).algorithm, CollectiveAlgorithm::kSliced);
  // More ranks than cores: every synchronisation sleeps, so flat reaches further.
  auto crowded = MustTable("host", {4, 4, 1, 2}, Isolated());
  EXPECT_EQ(crowded.Select(kAll, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(crowded.Select(kAll, kHostMem, (64 << 10) + 1).algorithm, CollectiveAlgorithm::kSliced);
  auto roomy = MustTable("host", {4, 4, 1, 4}, Isolated());
  EXPECT_EQ(roomy.Select(kAll, kHostMem, 2 << 10).algorithm, CollectiveAlgorithm::kSliced);
  // On Intel CPUs flat reaches 32 KiB (all-reduce) and 64 KiB (reduce), and the all-gather reads its
  // peers from 32 KiB of output (elsewhere 4 MiB); with more ranks than cores the oversubscribed rule decides.
  auto intel = MustTable("host", {2, 2, 1, 2, "GenuineIntel"}, Isolated());
  EXPECT_EQ(intel.Select(CollectiveKind::kAllgather, kHostMem, 32 << 10).algorithm, CollectiveAlgorithm::kSingleCopy);
  EXPECT_EQ(intel.Select(CollectiveKind::kAllgather, kHostMem, (32 << 10) - 1).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(host.Select(CollectiveKind::kAllgather, kHostMem, 2 << 20).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(intel.Select(kAll, kHostMem, 32 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(intel.Select(kAll, kHostMem, (32 << 10) + 1).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(intel.Select(kAll, kHostMem, (1 << 20) - 1).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(intel.Select(kAll, kHostMem, 1 << 20).algorithm, CollectiveAlgorithm::kSingleCopy);  // elsewhere sliced
  EXPECT_EQ(intel.Select(kAll, kHostMem, (64 << 20) + 1).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(intel.Select(CollectiveKind::kReduce, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(intel.Select(CollectiveKind::kReduce, kHostMem, (64 << 10) + 1).algorithm, CollectiveAlgorithm::kSliced);
  EXPECT_EQ(MustTable("host", {2, 2, 1, 2, "AuthenticAMD"}, Isolated()).Select(kAll, kHostMem, 2 << 10).algorithm,
            CollectiveAlgorithm::kSliced);
  auto intel_crowded = MustTable("host", {4, 4, 1, 2, "GenuineIntel"}, Isolated());
  EXPECT_EQ(intel_crowded.Select(CollectiveKind::kReduce, kHostMem, (64 << 10) + 1).algorithm,
            CollectiveAlgorithm::kSliced);
  EXPECT_EQ(host.Select(kAll, kHostMem, 8).source, Source::kDefault);
  // gloo within a node: up to a slot in the shared-memory meeting, then Gloo's algorithms.
  auto gloo2 = MustTable("gloo", {2, 2, 1}, Isolated());
  EXPECT_EQ(gloo2.Select(kAll, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(gloo2.Select(kAll, kHostMem, (64 << 10) + 1).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(gloo2.Select(kAll, kHostMem, 1 << 20).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(gloo2.Select(kAll, kHostMem, (1 << 20) + 1).algorithm, CollectiveAlgorithm::kRing);
  auto gloo4 = MustTable("gloo", {4, 4, 1}, Isolated());
  EXPECT_EQ(gloo4.Select(kAll, kHostMem, 256 << 10).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(gloo4.Select(kAll, kHostMem, 512 << 10).algorithm, CollectiveAlgorithm::kRing);
  auto gloo3 = MustTable("gloo", {3, 3, 1}, Isolated());
  EXPECT_EQ(gloo3.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(gloo3.Select(kAll, kHostMem, (64 << 10) + 1).algorithm, CollectiveAlgorithm::kRing);
  // Across nodes there is no meeting to carry data: Gloo from the first byte.
  auto gloo_nodes = MustTable("gloo", {2, 1, 2}, Isolated());
  EXPECT_EQ(gloo_nodes.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_FALSE(gloo_nodes.Uses(kAll, CollectiveAlgorithm::kFlat));
  EXPECT_FALSE(gloo3.Uses(kAll, CollectiveAlgorithm::kHalvingDoubling));
  EXPECT_TRUE(gloo2.Uses(kAll, CollectiveAlgorithm::kHalvingDoubling));
  auto mpi = MustTable("mpi", {2, 2, 1}, Isolated());
  EXPECT_EQ(mpi.Select(kAll, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(mpi.Select(kAll, kHostMem, (64 << 10) + 1).algorithm, CollectiveAlgorithm::kRing);
  const tune::Choice ring = mpi.Select(kAll, kHostMem, 1 << 20);
  EXPECT_EQ(ring.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(ring.params.segment_bytes, 256u << 10);
  // Not tunable: the backend's only way, said so.
  EXPECT_NE(mpi.Select(CollectiveKind::kBroadcast, kHostMem, 8).why.find("not tunable"), std::string::npos);
}

TEST(TuneTable, OverlappingItemsLaterWins) {
  auto t = MustTable("mpi", {2, 2, 1}, Isolated("allreduce:0-1M:ring, allreduce:64K-128K:recursive_doubling"));
  EXPECT_EQ(t.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(t.Select(kAll, kHostMem, 100 << 10).algorithm, CollectiveAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(t.Select(kAll, kHostMem, 128 << 10).algorithm, CollectiveAlgorithm::kRing);  // the end is exclusive
  EXPECT_EQ(t.Select(kAll, kHostMem, 100 << 10).source, Source::kEnv);
  EXPECT_EQ(t.Select(kAll, kHostMem, 2 << 20).source, Source::kDefault);
  // Shape and memory filters.
  auto shaped = MustTable("mpi", {2, 2, 1}, Isolated("allreduce:*:library:ranks=4-,allreduce@device:*:library"));
  EXPECT_EQ(shaped.Select(kAll, kHostMem, 8).source, Source::kDefault);
  EXPECT_EQ(shaped.Select(kAll, MemoryKind::kDevice, 8).algorithm, CollectiveAlgorithm::kLibrary);
}

TEST(TuneTable, ItemsForOtherBackendsOrShapes) {
  // A generic item applies where the backend has the algorithm; a backend item that names an
  // algorithm the backend lacks is an error naming the item and the backend's algorithms.
  auto gloo = MustTable("gloo", {2, 2, 1}, Isolated("allreduce:*:recursive_doubling,allreduce:0-8:bcube"));
  EXPECT_EQ(gloo.Select(kAll, kHostMem, 4).algorithm, CollectiveAlgorithm::kBcube);
  EXPECT_EQ(gloo.Select(kAll, kHostMem, 64).source, Source::kDefault);
  auto bad = tune::Table::ForGroup("gloo", {2, 2, 1}, Isolated("gloo.allreduce:*:sliced"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no sliced for allreduce (it has: ring, halving_doubling, bcube, flat)"),
            std::string::npos)
      << bad.status().message();
  // host ring is an across-hosts algorithm: within one host it is noted and ignored.
  auto host = MustTable("host", {2, 2, 1}, Isolated("host.allreduce:*:ring"));
  EXPECT_EQ(host.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kFlat);
  ASSERT_FALSE(host.notes().empty());
  EXPECT_NE(host.notes()[0].find("does not apply"), std::string::npos) << host.notes()[0];
}

// The grammar knows every algorithm name (collective_algorithm.h), including the algorithm layer's
// that no backend tunes: a backend item naming one is refused with the backend's list, a generic
// item is left to the backends that have it (none).
TEST(TuneTable, NamesNoBackendTunesAreRefusedOrIgnored) {
  auto parsed = tune::ParseSpec("broadcast:*:binomial_tree");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->at(0).algorithm, CollectiveAlgorithm::kBinomialTree);
  auto bad = tune::Table::ForGroup("mpi", {2, 2, 1}, Isolated("mpi.allreduce:*:pairwise"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no pairwise for allreduce (it has: recursive_doubling, ring, library, flat)"),
            std::string::npos)
      << bad.status().message();
  auto generic = MustTable("mpi", {2, 2, 1}, Isolated("allreduce:*:dissemination"));
  EXPECT_EQ(generic.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(generic.Select(kAll, kHostMem, 8).source, Source::kDefault);
}

// Table options whose calibration is these fits (and nothing from the machine).
tune::TableOptions Calibrated(std::vector<tune::Fit> fits) {
  tune::TableOptions o = Isolated();
  tune::Calibration c;
  c.created = "test";
  c.fits = std::move(fits);
  o.calibration = std::move(c);
  return o;
}

TEST(TuneTable, PrecedenceEnvOverCalibrationOverDefaults) {
  tune::TableOptions o = Isolated();
  o.calibration = SyntheticCalibration("mpi", 2);
  auto cal = MustTable("mpi", {2, 2, 1}, o);
  EXPECT_EQ(cal.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(cal.Select(kAll, kHostMem, 8).source, Source::kCalibration);
  EXPECT_EQ(cal.Select(kAll, kHostMem, 8 << 20).algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(cal.Select(kAll, kHostMem, 8 << 20).source, Source::kCalibration);
  const auto [s, by] = cal.Predict(kAll, CollectiveAlgorithm::kRecursiveDoubling, 1 << 20);
  EXPECT_NEAR(s, 10e-6 + (1 << 20) / 1e9, 1e-9);
  EXPECT_EQ(by, "calibration");
  // Another rank count: the calibration does not apply.
  auto other = MustTable("mpi", {4, 4, 1}, o);
  EXPECT_EQ(other.Select(kAll, kHostMem, 8).source, Source::kDefault);
  o.spec = "allreduce:0-1K:ring";
  auto env = MustTable("mpi", {2, 2, 1}, o);
  EXPECT_EQ(env.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(env.Select(kAll, kHostMem, 8).source, Source::kEnv);
  EXPECT_EQ(env.Select(kAll, kHostMem, 2048).source, Source::kCalibration);
}

// An all-gather or broadcast calibration moves the host's staged / single-copy boundary to where this
// machine crosses over (the built-in 4 MiB and 128 KiB came from measurements on one machine; another
// measured the single-copy all-gather 2.5-4x faster from 32 KiB). With more ranks than cores both stay staged.
TEST(TuneTable, CalibrationMovesTheSingleCopyBoundary) {
  for (const CollectiveKind kind : {CollectiveKind::kAllgather, CollectiveKind::kBroadcast}) {
    SCOPED_TRACE(ToString(kind));
    // staged: cheap per call, 4 GB/s; single copy: 2 us more, 16 GB/s; they cross at ~10.7 KB.
    auto table = MustTable("host", {2, 2, 1, 2},
                           Calibrated({CalibratedLine("host", kind, CollectiveAlgorithm::kFlat, 2, 1e-6, 4e9),
                                       CalibratedLine("host", kind, CollectiveAlgorithm::kSingleCopy, 2, 3e-6, 16e9)}));
    EXPECT_EQ(table.Select(kind, kHostMem, 4096).algorithm, CollectiveAlgorithm::kFlat);
    EXPECT_EQ(table.Select(kind, kHostMem, 4096).source, Source::kCalibration);
    EXPECT_EQ(table.Select(kind, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kSingleCopy);
    EXPECT_EQ(table.Select(kind, kHostMem, 64 << 10).source, Source::kCalibration);
    // Without the calibration the built-in boundary stays.
    auto plain = MustTable("host", {2, 2, 1, 2}, Isolated());
    EXPECT_EQ(plain.Select(kind, kHostMem, 64 << 10).algorithm, CollectiveAlgorithm::kFlat);
    EXPECT_EQ(plain.Select(kind, kHostMem, 8 << 20).algorithm, CollectiveAlgorithm::kSingleCopy);
    auto crowded = MustTable("host", {4, 4, 1, 2}, Isolated());
    EXPECT_EQ(crowded.Select(kind, kHostMem, 8 << 20).algorithm, CollectiveAlgorithm::kFlat);
    // The all-reduce rules are not touched by the calibration.
    EXPECT_EQ(table.Select(kAll, kHostMem, 64 << 10).source, Source::kDefault);
  }
  auto plain = MustTable("host", {2, 2, 1, 2}, Isolated());
  EXPECT_EQ(plain.Select(CollectiveKind::kBroadcast, kHostMem, 128 << 10).algorithm, CollectiveAlgorithm::kSingleCopy);
  EXPECT_EQ(plain.Select(CollectiveKind::kAllgather, kHostMem, 128 << 10).algorithm, CollectiveAlgorithm::kFlat);
}

// gloo's and mpi's flat runs in the shared-memory slots: a calibration that makes it the fastest
// everywhere still gives it only the sizes that fit a slot.
TEST(TuneTable, CalibratedFlatStopsAtTheSlot) {
  auto table = MustTable("gloo", {2, 2, 1},
                         Calibrated({CalibratedLine("gloo", kAll, CollectiveAlgorithm::kFlat, 2, 1e-6, 10e9),
                                     CalibratedLine("gloo", kAll, CollectiveAlgorithm::kHalvingDoubling, 2, 100e-6, 1e9)}));
  const std::size_t slot = tune::AlgorithmMaxBytes("gloo", CollectiveAlgorithm::kFlat, {2, 2, 1});
  EXPECT_EQ(slot, 64u << 10);
  EXPECT_EQ(table.Select(kAll, kHostMem, slot).algorithm, CollectiveAlgorithm::kFlat);
  EXPECT_EQ(table.Select(kAll, kHostMem, slot + 1).algorithm, CollectiveAlgorithm::kHalvingDoubling);
  EXPECT_EQ(table.Select(kAll, kHostMem, 16 << 20).source, Source::kCalibration);
  EXPECT_EQ(tune::AlgorithmMaxBytes("host", CollectiveAlgorithm::kFlat, {2, 2, 1}), tune::kNoLimit);
}

TEST(TuneTable, PrecedenceEnvOverTopologyOverDefaults) {
  // Across hosts the host backend plans with the given network link (the probed one in a backend).
  tune::TableOptions o = Isolated();
  o.network_Bps = 1.25e9;  // 10 Gb/s
  o.network_alpha_s = 25e-6;
  o.network_derivation = "test NIC 10 Gb/s";
  auto topo = MustTable("host", {4, 2, 2}, o);
  const tune::Choice big = topo.Select(kAll, kHostMem, 64 << 20);
  EXPECT_EQ(big.source, Source::kTopology);
  EXPECT_EQ(big.algorithm, CollectiveAlgorithm::kHierarchical);  // 2 ranks per host over a slow network
  EXPECT_TRUE(big.params.between.has_value());
  EXPECT_NE(big.why.find("test NIC 10 Gb/s"), std::string::npos) << big.why;
  // Within the hosts the reduce step keeps the defaults.
  EXPECT_EQ(topo.Select(CollectiveKind::kReduce, kHostMem, 8).source, Source::kDefault);
  o.spec = "host.allreduce:*:hierarchical:between=halving_doubling,host.allreduce:0-4K:ring";
  auto env = MustTable("host", {4, 2, 2}, o);
  EXPECT_EQ(env.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kRing);
  const tune::Choice forced = env.Select(kAll, kHostMem, 64 << 20);
  EXPECT_EQ(forced.source, Source::kEnv);
  EXPECT_EQ(forced.params.between, CollectiveAlgorithm::kHalvingDoubling);
  // Forced hierarchical without between=: the leaders' algorithm still comes from the model.
  o.spec = "host.allreduce:*:hierarchical";
  auto bare = MustTable("host", {4, 2, 2}, o);
  EXPECT_TRUE(bare.Select(kAll, kHostMem, 8).params.between.has_value());
}

TEST(TuneTable, DeprecatedVariablesBecomeRules) {
  {
    ScopedEnv v("COMMKIT_GLOO_ALGORITHM", "Bcube");
    tune::TableOptions o;
    o.spec = "";
    o.read_cache = false;
    auto t = MustTable("gloo", {2, 2, 1}, o);
    const tune::Choice c = t.Select(kAll, kHostMem, 8);
    EXPECT_EQ(c.algorithm, CollectiveAlgorithm::kBcube);
    EXPECT_EQ(c.source, Source::kEnv);
    EXPECT_NE(c.why.find("COMMKIT_GLOO_ALGORITHM=bcube (deprecated; read as COMMKIT_TUNE=gloo.allreduce:*:bcube)"),
              std::string::npos)
        << c.why;
    // COMMKIT_TUNE wins over the old variable.
    o.spec = "gloo.allreduce:*:ring";
    EXPECT_EQ(MustTable("gloo", {2, 2, 1}, o).Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kRing);
    // The host backend does not read gloo's variable.
    o.spec = "";
    EXPECT_EQ(MustTable("host", {2, 2, 1}, o).Select(kAll, kHostMem, 8).source, Source::kDefault);
  }
  {
    ScopedEnv flat("COMMKIT_HOST_FLAT_BYTES", "4096");
    ScopedEnv algo("COMMKIT_HOST_ALGORITHM", "halving_doubling");
    tune::TableOptions o;
    o.spec = "";
    o.read_cache = false;
    o.network_Bps = 12.5e9;
    auto one = MustTable("host", {2, 2, 1}, o);
    EXPECT_EQ(one.Select(kAll, kHostMem, 4096).algorithm, CollectiveAlgorithm::kFlat);
    EXPECT_EQ(one.Select(kAll, kHostMem, 4097).algorithm, CollectiveAlgorithm::kSliced);
    EXPECT_EQ(one.Select(CollectiveKind::kReduce, kHostMem, 4097).algorithm, CollectiveAlgorithm::kSliced);
    auto two = MustTable("host", {4, 2, 2}, o);
    EXPECT_EQ(two.Select(kAll, kHostMem, 8).algorithm, CollectiveAlgorithm::kHalvingDoubling);
    EXPECT_EQ(two.Select(kAll, kHostMem, 8).source, Source::kEnv);
  }
  {
    ScopedEnv bad("COMMKIT_GLOO_ALGORITHM", "fastest");
    tune::TableOptions o;
    o.spec = "";
    o.read_cache = false;
    auto t = tune::Table::ForGroup("gloo", {2, 2, 1}, o);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("COMMKIT_GLOO_ALGORITHM"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("fastest"), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace commkit::testing
