// Core-to-core round trips: two threads, each pinned to its CPU, hand one cache line back and forth.
// The partner waits for odd values and answers with the next even one; the timer runs on the caller.
#include "commkit/topology/core_latency.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "commkit/common/strings.h"

namespace commkit::topology {
namespace {

using Clock = std::chrono::steady_clock;

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The line both threads write, alone in its cache line.
struct alignas(64) Line {
  std::atomic<long> value{0};
  std::atomic<bool> stop{false};
};

// Spins until `v` holds `want`; false when the deadline passed first (looked at every 65536 polls).
bool SpinUntil(const std::atomic<long>& v, long want, Clock::time_point deadline) {
  for (std::uint32_t spins = 0; v.load(std::memory_order_acquire) != want;)
    if ((++spins & 0xffff) == 0 && Clock::now() > deadline) return false;
  return true;
}

}  // namespace

std::vector<int> AllowedCpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

Result<CoreLatency> MeasureCoreLatency(int cpu_a, int cpu_b, const CoreLatencyOptions& options) {
  const std::vector<int> allowed = AllowedCpus();
  for (int c : {cpu_a, cpu_b})
    if (std::find(allowed.begin(), allowed.end(), c) == allowed.end())
      return Status::InvalidArgument(StrCat("core latency: CPU ", c, " is not one this process may run on (allowed: ",
                                            JoinValues(allowed, ","), ")"));
  if (cpu_a == cpu_b) return Status::InvalidArgument(StrCat("core latency: CPU ", cpu_a, " given twice; name two CPUs"));
  if (options.round_trips < 1 || options.batches < 1)
    return Status::InvalidArgument("core latency: round_trips and batches must be >= 1");

  const Clock::time_point deadline = Clock::now() + options.budget;
  Line line;
  std::atomic<bool> pinned_ok{true};
  // The partner answers until told to stop; it gives up with the caller's deadline too, so neither side
  // spins past the budget when the other never runs.
  std::thread partner([&] {
    if (!Pin(cpu_b)) pinned_ok = false;
    long expect = 1;
    while (!line.stop.load(std::memory_order_relaxed)) {
      if (line.value.load(std::memory_order_acquire) == expect) {
        line.value.store(expect + 1, std::memory_order_release);
        expect += 2;
      } else if ((expect & 1023) == 1 && Clock::now() > deadline) {
        break;
      }
    }
  });
  const bool pinned_here = Pin(cpu_a);
  std::vector<double> batches;
  long v = 0;
  bool late = false;
  for (int b = 0; b < options.batches && !late; ++b) {
    const Clock::time_point t0 = Clock::now();
    int done = 0;
    for (; done < options.round_trips; ++done) {
      line.value.store(v + 1, std::memory_order_release);
      if (!SpinUntil(line.value, v + 2, deadline)) {
        late = true;
        break;
      }
      v += 2;
    }
    if (late) break;
    batches.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / done);
    if (Clock::now() > deadline) break;
  }
  line.stop = true;
  partner.join();

  // Bandwidth: the partner writes a block, the caller reads all of it, in turn. The block goes from one
  // core's cache to the other's every time, as a shared-memory collective's data does.
  double handoff_Bps = 0;
  if (!late && options.handoff_bytes >= 64 && options.handoffs > 0 && Clock::now() < deadline) {
    std::vector<std::uint64_t> block(options.handoff_bytes / 8, 0);
    Line turn;
    std::thread writer([&] {
      Pin(cpu_b);
      for (long k = 0; k < options.handoffs; ++k) {
        while (turn.value.load(std::memory_order_acquire) != 2 * k)
          if (turn.stop.load(std::memory_order_relaxed)) return;
        std::fill(block.begin(), block.end(), static_cast<std::uint64_t>(k));
        turn.value.store(2 * k + 1, std::memory_order_release);
      }
    });
    volatile std::uint64_t sink = 0;
    const Clock::time_point t0 = Clock::now();
    long k = 0;
    for (; k < options.handoffs; ++k) {
      if (!SpinUntil(turn.value, 2 * k + 1, deadline)) break;
      std::uint64_t sum = 0;
      for (std::uint64_t x : block) sum += x;
      sink = sink + sum;
      turn.value.store(2 * k + 2, std::memory_order_release);
    }
    turn.stop = true;
    writer.join();
    if (k > 0)
      handoff_Bps = static_cast<double>(k) * static_cast<double>(block.size() * 8) /
                    std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // The caller's own affinity back as it was.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : allowed) CPU_SET(c, &all);
  pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  if (!pinned_here || !pinned_ok) return Status::Unavailable(StrCat("core latency: could not pin threads to CPUs ", cpu_a, " and ", cpu_b));
  if (batches.empty())
    return Status::Timeout(StrCat("core latency: no batch of ", options.round_trips, " round trips between CPU ",
                                           cpu_a, " and CPU ", cpu_b, " finished within ", options.budget.count(),
                                           " ms (is another process spinning on one of them?)"));
  CoreLatency out;
  out.cpu_a = cpu_a;
  out.cpu_b = cpu_b;
  std::sort(batches.begin(), batches.end());
  out.round_trip_ns = batches[batches.size() / 2];
  out.handoff_Bps = handoff_Bps;
  out.min_ns = batches.front();
  out.max_ns = batches.back();
  return out;
}

}  // namespace commkit::topology
