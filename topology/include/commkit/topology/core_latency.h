// Core-to-core latency: how long a cache line takes to travel between two CPUs and back, and how fast
// a block written on one of them is read on the other.
//
// On one socket the answer depends on where the two cores sit: sharing a core complex (an L3 slice) a
// round trip takes tens of nanoseconds; across dies, chiplets (AMD CCDs) or sockets several times
// more. Shared-memory collectives move every byte that way, so a pair's latency bounds what they can
// reach. On virtual machines it is also how one sees the hypervisor moving the vCPUs: the same two
// vCPUs measure 60-140 ns in one minute and 310-390 ns the next when their host threads land on different
// chiplets (docs/benchmarks.md).
#pragma once

#include <chrono>
#include <vector>

#include "commkit/common/status.h"

namespace commkit::topology {

struct CoreLatencyOptions {
  int round_trips = 20000;  // per batch
  int batches = 5;          // the result is the median batch
  // Then `handoffs` times: the second CPU writes `handoff_bytes`, the first reads them (0: skip).
  std::size_t handoff_bytes = 64 << 10;
  int handoffs = 200;
  // Every pair is bounded by this, however the scheduler treats the two threads.
  std::chrono::milliseconds budget{2000};
};

struct CoreLatency {
  int cpu_a = -1, cpu_b = -1;
  double round_trip_ns = 0;  // median over the batches
  double min_ns = 0, max_ns = 0;
  // Bytes per second of the block handoffs (written on one core, read on the other, in turn; the
  // writer's and the reader's time both count); 0 when not measured.
  double handoff_Bps = 0;
};

// The CPUs this process may run on (sched_getaffinity), in order.
std::vector<int> AllowedCpus();

// One cache line bounced between a thread pinned to `cpu_a` and one pinned to `cpu_b`.
// InvalidArgument for a CPU outside the allowed set or a == b; Timeout when the budget ran
// out before the first batch completed (a partner thread that never got a CPU).
Result<CoreLatency> MeasureCoreLatency(int cpu_a, int cpu_b, const CoreLatencyOptions& options = {});

}  // namespace commkit::topology
