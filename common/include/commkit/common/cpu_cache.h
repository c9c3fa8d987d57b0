// The largest cache a CPU sits behind, as sysfs describes it (/sys/devices/system/cpu/cpuN/cache), and
// who made the CPU (/proc/cpuinfo): what the host backend's memory layout depends on. Read through a
// SystemView, so a captured machine replays.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "commkit/common/system_view.h"

namespace commkit {

struct CpuCache {
  int level = 0;           // 3 for an L3
  std::size_t bytes = 0;   // its size
};

// The highest-level data or unified cache of `cpu`; nullopt when sysfs does not list one with a
// readable size (containers that hide /sys, other kernels).
std::optional<CpuCache> LastLevelCache(const SystemView& view, int cpu);

// The first `vendor_id` of /proc/cpuinfo ("GenuineIntel", "AuthenticAMD"); empty when unreadable or
// absent (other architectures print no such line).
std::string CpuVendor(const SystemView& view);
// CpuVendor of the machine this process runs on, read once.
const std::string& ThisCpuVendor();

}  // namespace commkit
