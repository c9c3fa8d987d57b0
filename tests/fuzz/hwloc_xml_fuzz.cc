// libFuzzer target: hwloc XML importer + path classification + re-export, and the hwloc locality
// reader + merge (into the imported topology and into an empty probe report, which grafts every
// device); a merged topology must still validate.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "commkit/topology/export.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace commkit::topology;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = ImportHwlocXml(text, "fuzz");
  if (t.ok()) {
    (void)ComputePaths(*t);
    (void)ExportNcclXml(*t);
    ProbeReport into_import;
    into_import.topology = *t;
    if (MergeHwloc(text, into_import, "fuzz").ok() && !into_import.topology.Validate().ok()) std::abort();
    ProbeReport empty;
    if (MergeHwloc(text, empty, "fuzz").ok()) {
      if (!empty.topology.Validate().ok()) std::abort();
      (void)ComputePaths(empty.topology);
    }
  }
  (void)ReadHwlocLocality(text, "fuzz");
  return 0;
}
