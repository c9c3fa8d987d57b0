// Live hwloc snapshot (compiled only when COMMKIT_HAVE_HWLOC): load this machine's topology with I/O
// objects and export it as hwloc v2 XML. The only file that includes <hwloc.h>.
#include <hwloc.h>

#include <cerrno>
#include <cstring>

#include "commkit/common/strings.h"
#include "commkit/topology/hwloc.h"

namespace commkit::topology {
namespace {

class TopologyHandle {
 public:
  TopologyHandle() = default;
  ~TopologyHandle() {
    if (ok_) hwloc_topology_destroy(t_);
  }
  TopologyHandle(const TopologyHandle&) = delete;
  TopologyHandle& operator=(const TopologyHandle&) = delete;
  int Init() {
    const int rc = hwloc_topology_init(&t_);
    ok_ = rc == 0;
    return rc;
  }
  hwloc_topology_t get() const { return t_; }

 private:
  hwloc_topology_t t_{};
  bool ok_ = false;
};

// hwloc loads its plugins (dlopen) when the first topology is initialised and unloads them (dlclose)
// when the last one is destroyed. An initialised, never-loaded topology kept for the life of the
// process keeps them loaded: repeated probes do not reload them, and what the plugins allocate stays
// reachable (LeakSanitizer cannot follow pointers held in an unloaded module's data).
void KeepPluginsLoaded() {
  static const bool kept = [] {
    static hwloc_topology_t keeper{};
    return hwloc_topology_init(&keeper) == 0;
  }();
  (void)kept;
}

}  // namespace

HwlocSnapshot HwlocSnapshotLive() {
  HwlocSnapshot s;
  s.version = HWLOC_VERSION;  // the headers we built against; the XML's hwlocVersion wins when present
  const unsigned api = hwloc_get_api_version();
  if ((api >> 16) != (HWLOC_API_VERSION >> 16)) {
    s.error = StrCat("libhwloc API ", api >> 16, ".x at run time, built against ", HWLOC_API_VERSION >> 16,
                     ".x; install the matching libhwloc or rebuild commkit");
    return s;
  }
  KeepPluginsLoaded();
  TopologyHandle topo;
  if (topo.Init() != 0) {
    s.error = StrCat("hwloc_topology_init: ", std::strerror(errno));
    return s;
  }
  // PCI devices, OS devices (netdevs, RDMA, GPUs) and the bridges that lead to them; bridges with
  // nothing interesting below are dropped (HWLOC_TYPE_FILTER_KEEP_IMPORTANT).
  hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo.get()) != 0) {
    s.error = StrCat("hwloc_topology_load: ", std::strerror(errno));
    return s;
  }
  char* buf = nullptr;
  int len = 0;
  if (hwloc_topology_export_xmlbuffer(topo.get(), &buf, &len, 0) != 0 || buf == nullptr) {
    s.error = StrCat("hwloc_topology_export_xmlbuffer: ", std::strerror(errno));
    return s;
  }
  // len counts the terminating NUL.
  s.xml.assign(buf, len > 0 ? static_cast<std::size_t>(len - 1) : std::strlen(buf));
  hwloc_free_xmlbuffer(topo.get(), buf);
  s.available = true;
  return s;
}

}  // namespace commkit::topology
