// Live hwloc snapshot (compiled only when COMMKIT_HAVE_HWLOC): load this machine's topology with I/O
// objects and export it as hwloc v2 XML. The only file that includes <hwloc.h>, for its types,
// constants and signatures only: libhwloc.so.15 is loaded at run time (optional_library.h), so
// nothing here may call an hwloc function by name.
#include <hwloc.h>

#include <cerrno>
#include <cstring>

#include "commkit/common/strings.h"
#include "commkit/topology/hwloc.h"
#include "probers/optional_library.h"

namespace commkit::topology {
namespace {

struct Api {
  decltype(&::hwloc_get_api_version) get_api_version = nullptr;
  decltype(&::hwloc_topology_init) topology_init = nullptr;
  decltype(&::hwloc_topology_destroy) topology_destroy = nullptr;
  decltype(&::hwloc_topology_set_io_types_filter) set_io_types_filter = nullptr;
  decltype(&::hwloc_topology_load) topology_load = nullptr;
  decltype(&::hwloc_topology_export_xmlbuffer) export_xmlbuffer = nullptr;
  decltype(&::hwloc_free_xmlbuffer) free_xmlbuffer = nullptr;
};

Result<Api> LoadApi() {
  COMMKIT_ASSIGN_OR_RETURN(DynamicLibrary lib, OpenOptionalLibrary(kLibhwloc));
  Api a;
  for (const Status& s : {lib.Bind(a.get_api_version, "hwloc_get_api_version"), lib.Bind(a.topology_init, "hwloc_topology_init"),
                          lib.Bind(a.topology_destroy, "hwloc_topology_destroy"),
                          lib.Bind(a.set_io_types_filter, "hwloc_topology_set_io_types_filter"),
                          lib.Bind(a.topology_load, "hwloc_topology_load"),
                          lib.Bind(a.export_xmlbuffer, "hwloc_topology_export_xmlbuffer"),
                          lib.Bind(a.free_xmlbuffer, "hwloc_free_xmlbuffer")})
    if (!s.ok()) return MissingSymbol(kLibhwloc, s);
  lib.Leak();  // its plugins keep pointers into it; see KeepPluginsLoaded
  return a;
}

class TopologyHandle {
 public:
  explicit TopologyHandle(const Api& api) : api_(api) {}
  ~TopologyHandle() {
    if (ok_) api_.topology_destroy(t_);
  }
  TopologyHandle(const TopologyHandle&) = delete;
  TopologyHandle& operator=(const TopologyHandle&) = delete;
  int Init() {
    const int rc = api_.topology_init(&t_);
    ok_ = rc == 0;
    return rc;
  }
  hwloc_topology_t get() const { return t_; }

 private:
  const Api& api_;
  hwloc_topology_t t_{};
  bool ok_ = false;
};

// hwloc loads its plugins (dlopen) when the first topology is initialised and unloads them (dlclose)
// when the last one is destroyed. An initialised, never-loaded topology kept for the life of the
// process keeps them loaded: repeated probes do not reload them, and what the plugins allocate stays
// reachable (LeakSanitizer cannot follow pointers held in an unloaded module's data).
void KeepPluginsLoaded(const Api& api) {
  static const bool kept = [&api] {
    static hwloc_topology_t keeper{};
    return api.topology_init(&keeper) == 0;
  }();
  (void)kept;
}

}  // namespace

HwlocSnapshot HwlocSnapshotLive() {
  HwlocSnapshot s;
  s.version = HWLOC_VERSION;  // the headers we built against; the XML's hwlocVersion wins when present
  auto api = LoadApi();
  if (!api.ok()) {
    s.error = api.status().message();
    return s;
  }
  const unsigned version = api->get_api_version();
  if ((version >> 16) != (HWLOC_API_VERSION >> 16)) {
    s.error = StrCat("libhwloc API ", version >> 16, ".x at run time, built against ", HWLOC_API_VERSION >> 16,
                     ".x; install the matching libhwloc or rebuild commkit");
    return s;
  }
  KeepPluginsLoaded(*api);
  TopologyHandle topo(*api);
  if (topo.Init() != 0) {
    s.error = StrCat("hwloc_topology_init: ", std::strerror(errno));
    return s;
  }
  // PCI devices, OS devices (netdevs, RDMA, GPUs) and the bridges that lead to them; bridges with
  // nothing interesting below are dropped (HWLOC_TYPE_FILTER_KEEP_IMPORTANT).
  api->set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (api->topology_load(topo.get()) != 0) {
    s.error = StrCat("hwloc_topology_load: ", std::strerror(errno));
    return s;
  }
  char* buf = nullptr;
  int len = 0;
  if (api->export_xmlbuffer(topo.get(), &buf, &len, 0) != 0 || buf == nullptr) {
    s.error = StrCat("hwloc_topology_export_xmlbuffer: ", std::strerror(errno));
    return s;
  }
  // len counts the terminating NUL.
  s.xml.assign(buf, len > 0 ? static_cast<std::size_t>(len - 1) : std::strlen(buf));
  api->free_xmlbuffer(topo.get(), buf);
  s.available = true;
  return s;
}

}  // namespace commkit::topology
