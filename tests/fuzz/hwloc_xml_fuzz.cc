// libFuzzer target: hwloc XML importer + path classification + re-export.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace commkit::topology;
  auto t = ImportHwlocXml(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (t.ok()) {
    (void)ComputePaths(*t);
    (void)ExportNcclXml(*t);
  }
  return 0;
}
