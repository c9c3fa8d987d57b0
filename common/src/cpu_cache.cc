#include "commkit/common/cpu_cache.h"

#include <string>

#include "commkit/common/strings.h"

namespace commkit {

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
    // sysfs writes sizes as "32768K".
    Result<std::size_t> bytes = ParseByteSize(*size);
    if (!l || *l <= 0 || *l > 8 || !bytes.ok() || *bytes == 0) continue;
    if (!best || *l > best->level) best = CpuCache{static_cast<int>(*l), *bytes};
  }
  return best;
}

std::string CpuVendor(const SystemView& view) {
  auto text = view.ReadFile("/proc/cpuinfo", 1 << 20);
  if (!text.ok()) return "";
  for (const std::string& line : Split(*text, '\n')) {
    if (!StartsWith(line, "vendor_id")) continue;
    const std::size_t colon = line.find(':');
    return colon == std::string::npos ? "" : std::string(Trim(std::string_view(line).substr(colon + 1)));
  }
  return "";
}

const std::string& ThisCpuVendor() {
  static const std::string vendor = CpuVendor(*SystemView::Live());
  return vendor;
}

}  // namespace commkit
