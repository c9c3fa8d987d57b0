// libFuzzer target: commkit topology JSON (LoadJson), and the round trip of what loads: the export
// of a loaded topology must load again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "commkit/topology/json.h"
#include "commkit/topology/path.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace commkit::topology;
  auto t = LoadJson(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (!t.ok()) return 0;
  (void)ComputePaths(*t);
  const std::string text = ExportJson(*t);
  auto again = LoadJson(text, "export.json");
  if (!again.ok()) {
    std::fprintf(stderr, "re-load of the export failed: %s\n", again.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
