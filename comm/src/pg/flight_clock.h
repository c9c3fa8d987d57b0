// The clock of the flight recorder and the metrics: a tick counter cheap enough to read three times
// per operation (the TSC on x86-64 when the kernel trusts it as its clocksource, the virtual counter
// on aarch64; CLOCK_MONOTONIC otherwise), converted to nanoseconds and unix time only when read back.
// A clock_gettime costs 20-90 ns on virtual machines; a TSC read a few ns.
#pragma once

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace commkit::flight_clock {

// Set once by Init(), before any recorder exists (and so before any Now()).
extern bool g_use_counter;
extern double g_ns_per_tick;

// Calibrates (once per process; a few milliseconds the first time).
void Init();

inline std::int64_t Now() {
#if defined(__x86_64__)
  if (g_use_counter) return static_cast<std::int64_t>(__rdtsc());
#elif defined(__aarch64__)
  if (g_use_counter) {
    std::uint64_t v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return static_cast<std::int64_t>(v);
  }
#endif
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline std::int64_t TicksToNanos(std::int64_t ticks) { return static_cast<std::int64_t>(static_cast<double>(ticks) * g_ns_per_tick); }

// Unix time (ns) of a tick value, anchored at the time of the call (so the error grows with the age
// of `ticks`, not with the process's). 0 stays 0 ("not yet").
std::int64_t ToUnixNanos(std::int64_t ticks);

}  // namespace commkit::flight_clock
