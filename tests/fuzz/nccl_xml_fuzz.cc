// libFuzzer target: NCCL topology XML importer + path classification + re-export; what exports must
// import again (an exported file NCCL-style readers cannot read back is a bug).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace commkit::topology;
  auto t = ImportNcclXml(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (t.ok()) {
    (void)ComputePaths(*t);
    auto xml = ExportNcclXml(*t);
    if (xml.ok()) {
      auto again = ImportNcclXml(*xml, "export");
      if (!again.ok()) {
        std::fprintf(stderr, "re-import of the export failed: %s\n%s\n", again.status().ToString().c_str(), xml->c_str());
        std::abort();
      }
    }
  }
  return 0;
}
