// dlopen/dlsym behind Result: how commkit loads NVML, libcuda, rdma-core, libfabric, hwloc and UCX, so
// the tools start (and report "Skipped: libnvidia-ml.so.1 not found") on nodes without them.
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

// An optional library a commkit component loads at run time, so that a build with it still starts on
// a node without it and the component reports "<soname> not available: <why>; <remedy>" instead.
struct OptionalLibrary {
  std::string_view soname;        // "libibverbs.so.1"
  std::string_view override_env;  // "COMMKIT_LIBIBVERBS": a file or name to load instead
  std::string_view remedy;        // "install rdma-core / ibverbs-providers to probe RDMA devices"
};

// Loads `lib` (or what its override variable names). Unavailable:
// "libibverbs.so.1 not available: <dlerror>; install rdma-core / ibverbs-providers to probe ...".
// Callers bind their symbols, then Leak() the handle: providers and plugins the library loads keep
// pointers into it, so it stays mapped for the life of the process.
Result<DynamicLibrary> OpenOptionalLibrary(const OptionalLibrary& lib);

// The error for a library that loads but lacks a symbol the caller needs (too old a version):
// "libibverbs.so.1 (/usr/lib/...) lacks _ibv_query_gid_ex: ...; <remedy>".
Status MissingSymbol(const OptionalLibrary& lib, const Status& lookup);

// Whether an error text is one of the two above for `lib` (the library is absent or too old): the
// caller then skips the work, as a build without the library would, instead of failing.
bool IsLibraryUnavailable(const OptionalLibrary& lib, std::string_view error);

}  // namespace commkit
