// A steady-clock reading for deadlines, at a fraction of the cost of a precise one.
//
// A deadline seconds away does not need nanoseconds: CLOCK_MONOTONIC_COARSE returns the time of the
// last scheduler tick (at most a few milliseconds behind) without reading the hardware counter. On
// the virtual machines we measured it costs ~6 ns against ~25 ns for std::chrono::steady_clock::now(),
// and a small collective reads the clock on every call. The result is on steady_clock's scale (both
// are CLOCK_MONOTONIC), so it compares with steady_clock::now() directly; a deadline computed from it
// falls due at most one tick early.
#pragma once

#include <time.h>

#include <chrono>

namespace commkit {

inline std::chrono::steady_clock::time_point CoarseSteadyNow() {
#if defined(CLOCK_MONOTONIC_COARSE)
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
    return std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
#endif
  return std::chrono::steady_clock::now();
}

}  // namespace commkit
