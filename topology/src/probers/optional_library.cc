#include "probers/optional_library.h"

#include <string>

#include "commkit/common/env.h"
#include "commkit/common/strings.h"

namespace commkit::topology {

Result<DynamicLibrary> OpenOptionalLibrary(const OptionalLibrary& lib) {
  std::string name(lib.soname);
  std::string via;
  auto override_name = EnvString(lib.override_env);
  if (!override_name.ok())
    return Status::Unavailable(StrCat(lib.soname, " not available: ", override_name.status().message(), "; ", lib.remedy));
  if (*override_name && !(*override_name)->empty()) {
    name = **override_name;
    via = StrCat(" (", lib.override_env, "=", name, ")");
  }
  auto loaded = DynamicLibrary::OpenOne(name);
  if (!loaded.ok())
    return Status::Unavailable(StrCat(lib.soname, " not available", via, ": ", loaded.status().message(), "; ", lib.remedy));
  return loaded;
}

Status MissingSymbol(const OptionalLibrary& lib, const Status& lookup) {
  return Status::Unavailable(StrCat(lib.soname, " not available: ", lookup.message(), " (too old?); ", lib.remedy));
}

bool IsLibraryUnavailable(const OptionalLibrary& lib, std::string_view error) {
  return StartsWith(error, StrCat(lib.soname, " not available"));
}

}  // namespace commkit::topology
