#include "commkit/common/cpu_cache.h"

#include <string>

#include "commkit/common/strings.h"

namespace commkit {
namespace {

// sysfs writes sizes as "32768K" (the kernel's format), and "1M" or plain bytes in some captures.
std::optional<std::size_t> ParseCacheSize(std::string_view text) {
  std::size_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': unit = std::size_t{1} << 10; break;
      case 'M': case 'm': unit = std::size_t{1} << 20; break;
      case 'G': case 'g': unit = std::size_t{1} << 30; break;
      default: break;
    }
    if (unit != 1) text.remove_suffix(1);
  }
  std::optional<std::int64_t> n = ParseInt(text);
  if (!n || *n <= 0 || static_cast<std::uint64_t>(*n) > (std::uint64_t{1} << 50) / unit) return std::nullopt;
  return static_cast<std::size_t>(*n) * unit;
}

}  // namespace

std::optional<CpuCache> LastLevelCache(const SystemView& view, int cpu) {
  if (cpu < 0) return std::nullopt;
  const std::string dir = StrCat("/sys/devices/system/cpu/cpu", cpu, "/cache");
  auto entries = view.ListDir(dir);
  if (!entries.ok()) return std::nullopt;
  std::optional<CpuCache> best;
  for (const std::string& name : *entries) {
    if (!StartsWith(name, "index")) continue;
    const std::string base = StrCat(dir, "/", name, "/");
    auto type = view.ReadAttr(base + "type");
    if (!type.ok() || *type == "Instruction") continue;
    auto level = view.ReadAttr(base + "level");
    auto size = view.ReadAttr(base + "size");
    if (!level.ok() || !size.ok()) continue;
    std::optional<std::int64_t> l = ParseInt(*level);
    std::optional<std::size_t> bytes = ParseCacheSize(*size);
    if (!l || *l <= 0 || *l > 8 || !bytes) continue;
    if (!best || *l > best->level) best = CpuCache{static_cast<int>(*l), *bytes};
  }
  return best;
}

}  // namespace commkit
