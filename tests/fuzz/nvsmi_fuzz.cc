// libFuzzer target: nvidia-smi topo -m / -p2p importers, classification and re-export.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "commkit/topology/export.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace commkit::topology;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ImportNvsmiMatrix(text, "fuzz");
  if (m.ok()) {
    (void)ComputePaths(*m);
    (void)ExportNvsmiMatrix(*m);
  }
  auto p = ImportNvsmiP2p(text, "fuzz");
  if (p.ok()) (void)ComputePaths(*p);
  return 0;
}
