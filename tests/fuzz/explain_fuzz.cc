// libFuzzer target: gpudoctor explain's public entry on arbitrary log text, and both renderings.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "commkit/diagnostics/explain.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto ex = commkit::diagnostics::ExplainLog(std::string_view(reinterpret_cast<const char*>(data), size));
  (void)ex.ToText();
  (void)ex.ToJson();
  return 0;
}
