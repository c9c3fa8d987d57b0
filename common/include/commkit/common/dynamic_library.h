// dlopen/dlsym behind Result: how commkit loads NVML, libcuda and other optional runtime libraries,
// so the tools start (and report "Skipped: libnvidia-ml.so.1 not found") on nodes without a driver.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

class DynamicLibrary {
 public:
  // Tries each name in order with dlopen(RTLD_NOW | RTLD_LOCAL). The Unavailable error lists every
  // name tried with dlerror()'s text.
  static Result<DynamicLibrary> Open(const std::vector<std::string>& names);
  static Result<DynamicLibrary> Open(std::initializer_list<std::string_view> names);
  // One name (or path); the Unavailable error is dlerror()'s text alone, for callers that word
  // their own message ("libibverbs.so.1 not available: ...; install rdma-core").
  static Result<DynamicLibrary> OpenOne(const std::string& name);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // The name that loaded, and the file it resolved to (from dlinfo), when known.
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }

  Result<void*> Symbol(std::string_view symbol) const;

  // Typed lookup: Function<int(unsigned*)>("nvmlDeviceGetCount_v2").
  template <typename Signature>
  Result<Signature*> Function(std::string_view symbol) const {
    COMMKIT_ASSIGN_OR_RETURN(void* address, Symbol(symbol));
    return reinterpret_cast<Signature*>(address);
  }

  // Typed lookup into an existing pointer, typed by it: lib.Bind(api.open_device, "ibv_open_device").
  template <typename Signature>
  Status Bind(Signature*& function, std::string_view symbol) const {
    COMMKIT_ASSIGN_OR_RETURN(function, Function<Signature>(symbol));
    return Status::Ok();
  }

  // Keep the library mapped after this object dies (for libraries that must not be unloaded,
  // such as libcuda once a context exists).
  void Leak() { handle_ = nullptr; }

 private:
  DynamicLibrary(void* handle, std::string name, std::string path)
      : handle_(handle), name_(std::move(name)), path_(std::move(path)) {}
  void* handle_ = nullptr;
  std::string name_;
  std::string path_;
};

}  // namespace commkit
