#include "commkit/common/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include "commkit/common/env.h"
#include "commkit/common/strings.h"

namespace commkit {

Result<DynamicLibrary> DynamicLibrary::OpenOne(const std::string& name) {
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return Status::Unavailable(err ? std::string(err) : name + ": unknown dlopen error");
  }
  std::string path = name;
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name && *map->l_name)
    path = map->l_name;
  return DynamicLibrary(handle, name, path);
}

Result<DynamicLibrary> DynamicLibrary::Open(const std::vector<std::string>& names) {
  std::vector<std::string> errors;
  for (const auto& name : names) {
    auto lib = OpenOne(name);
    if (lib.ok()) return lib;
    errors.push_back(lib.status().message());
  }
  return Status::Unavailable(StrCat("cannot load ", Join(names, " or "), " (", Join(errors, "; "), ")"));
}

Result<DynamicLibrary> DynamicLibrary::Open(std::initializer_list<std::string_view> names) {
  std::vector<std::string> list;
  for (auto n : names) list.emplace_back(n);
  return Open(list);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(other.handle_), name_(std::move(other.name_)), path_(std::move(other.path_)) {
  other.handle_ = nullptr;
}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) ::dlclose(handle_);
    handle_ = other.handle_;
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    other.handle_ = nullptr;
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) ::dlclose(handle_);
}

Result<void*> DynamicLibrary::Symbol(std::string_view symbol) const {
  if (handle_ == nullptr) return Status::Unavailable(StrCat(name_, " is not loaded"));
  std::string sym(symbol);
  ::dlerror();
  void* address = ::dlsym(handle_, sym.c_str());
  if (address == nullptr) {
    const char* err = ::dlerror();
    return Status::NotFound(StrCat(path_, " has no symbol ", sym, err ? StrCat(" (", err, ")") : std::string()));
  }
  return address;
}

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

}  // namespace commkit
