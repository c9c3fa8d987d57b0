// Live libibverbs enumeration (compiled only when COMMKIT_HAVE_IBVERBS): devices, ports, GID table
// with GID types. A machine without RDMA devices answers {"available": true, "devices": []}.
// libibverbs.so.1 is loaded at run time (optional_library.h); <infiniband/verbs.h> gives the types,
// constants and signatures only, so nothing here may call a libibverbs function by name.
#include <infiniband/verbs.h>
#include <net/if.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "commkit/common/strings.h"
#include "commkit/topology/verbs.h"
#include "probers/optional_library.h"

namespace commkit::topology {
namespace {

// The libibverbs entry points used here. ibv_query_port and ibv_query_gid_ex are inline wrappers in
// verbs.h; Api::QueryPort and Api::QueryGid do what those wrappers do through the loaded symbols.
struct Api {
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_get_device_guid) get_device_guid = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  int (*query_port_compat)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;  // exported ibv_query_port
  decltype(&::_ibv_query_gid_ex) query_gid_ex = nullptr;

  // Providers with the extended verbs context answer the full ibv_port_attr; older ones fill the
  // compat layout, a prefix of it.
  int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
    verbs_context* vctx = verbs_get_ctx(ctx);
    if (vctx && vctx->sz >= sizeof(*vctx) - offsetof(verbs_context, query_port) && vctx->query_port)
      return vctx->query_port(ctx, port, attr, sizeof(*attr));
    std::memset(attr, 0, sizeof(*attr));
    return query_port_compat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
  }
  int QueryGid(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry) const {
    return query_gid_ex(ctx, port, index, entry, 0, sizeof(*entry));
  }
};

Result<Api> LoadApi() {
  COMMKIT_ASSIGN_OR_RETURN(DynamicLibrary lib, OpenOptionalLibrary(kLibibverbs));
  Api a;
  for (const Status& s : {lib.Bind(a.get_device_list, "ibv_get_device_list"), lib.Bind(a.free_device_list, "ibv_free_device_list"),
                          lib.Bind(a.get_device_name, "ibv_get_device_name"), lib.Bind(a.get_device_guid, "ibv_get_device_guid"),
                          lib.Bind(a.open_device, "ibv_open_device"), lib.Bind(a.close_device, "ibv_close_device"),
                          lib.Bind(a.query_device, "ibv_query_device"), lib.Bind(a.query_port_compat, "ibv_query_port"),
                          lib.Bind(a.query_gid_ex, "_ibv_query_gid_ex")})
    if (!s.ok()) return MissingSymbol(kLibibverbs, s);
  lib.Leak();  // providers keep pointers into it
  return a;
}

std::string GidText(const ibv_gid& gid) {
  char buf[40];
  const unsigned char* r = gid.raw;
  std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0], r[1],
                r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
  return buf;
}

std::string GuidText(__be64 guid_be) {
  const auto* b = reinterpret_cast<const unsigned char*>(&guid_be);  // network order bytes
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
  return buf;
}

VerbsDevice QueryDevice(const Api& api, ibv_device* device, std::string& warning) {
  VerbsDevice d;
  d.name = api.get_device_name(device);
  d.node_guid = GuidText(api.get_device_guid(device));
  ibv_context* ctx = api.open_device(device);
  if (!ctx) {
    warning = StrCat(d.name, ": ibv_open_device failed (", std::strerror(errno), "; check /dev/infiniband permissions)");
    return d;
  }
  ibv_device_attr attr{};
  if (api.query_device(ctx, &attr) == 0) {
    for (int pn = 1; pn <= attr.phys_port_cnt; ++pn) {
      ibv_port_attr pa{};
      if (api.QueryPort(ctx, static_cast<uint8_t>(pn), &pa) != 0) continue;
      VerbsPort p;
      p.port = pn;
      p.state = pa.state;
      p.phys_state = pa.phys_state;
      p.link_layer = pa.link_layer;
      p.active_speed = pa.active_speed;
      p.active_width = pa.active_width;
      p.active_mtu = pa.active_mtu;
      for (int gi = 0; gi < pa.gid_tbl_len && gi < 1024; ++gi) {
        ibv_gid_entry entry{};
        if (api.QueryGid(ctx, static_cast<uint32_t>(pn), static_cast<uint32_t>(gi), &entry) != 0) continue;  // empty slot
        VerbsGid g;
        g.index = gi;
        g.gid = GidText(entry.gid);
        if (g.gid == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
        g.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? 1 : 0;
        char ifname[IF_NAMESIZE] = {};
        if (entry.ndev_ifindex != 0 && if_indextoname(entry.ndev_ifindex, ifname)) g.ndev = ifname;
        p.gids.push_back(std::move(g));
      }
      d.ports.push_back(std::move(p));
    }
  } else {
    warning = StrCat(d.name, ": ibv_query_device failed (", std::strerror(errno), ")");
  }
  api.close_device(ctx);
  return d;
}

}  // namespace

std::string VerbsFact() {
  VerbsReport r;
  auto api = LoadApi();
  if (!api.ok()) {
    r.error = api.status().message();
    return VerbsReportToJson(r);
  }
  int n = 0;
  errno = 0;
  ibv_device** list = api->get_device_list(&n);
  if (!list) {
    // ENOSYS: no kernel support (no ib_uverbs); otherwise report errno.
    r.available = errno == ENOSYS;
    r.error = errno == ENOSYS ? "no RDMA kernel support (ib_uverbs not loaded)" : StrCat("ibv_get_device_list: ", std::strerror(errno));
    return VerbsReportToJson(r);
  }
  r.available = true;
  std::vector<std::string> warnings;
  for (int i = 0; i < n; ++i) {
    std::string warning;
    r.devices.push_back(QueryDevice(*api, list[i], warning));
    if (!warning.empty()) warnings.push_back(std::move(warning));
  }
  api->free_device_list(list);
  r.error = Join(warnings, "; ");
  return VerbsReportToJson(r);
}

}  // namespace commkit::topology
