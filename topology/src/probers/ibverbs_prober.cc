// Live libibverbs enumeration (compiled only when COMMKIT_HAVE_IBVERBS): devices, ports, GID table
// with GID types. A machine without RDMA devices answers {"available": true, "devices": []}.
#include <infiniband/verbs.h>
#include <net/if.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commkit/common/strings.h"
#include "commkit/topology/verbs.h"

namespace commkit::topology {
namespace {

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

VerbsDevice QueryDevice(ibv_device* device, std::string& warning) {
  VerbsDevice d;
  d.name = ibv_get_device_name(device);
  d.node_guid = GuidText(ibv_get_device_guid(device));
  ibv_context* ctx = ibv_open_device(device);
  if (!ctx) {
    warning = StrCat(d.name, ": ibv_open_device failed (", std::strerror(errno), "; check /dev/infiniband permissions)");
    return d;
  }
  ibv_device_attr attr{};
  if (ibv_query_device(ctx, &attr) == 0) {
    for (int pn = 1; pn <= attr.phys_port_cnt; ++pn) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, static_cast<uint8_t>(pn), &pa) != 0) continue;
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
        if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(pn), static_cast<uint32_t>(gi), &entry, 0) != 0) continue;  // empty slot
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
  ibv_close_device(ctx);
  return d;
}

}  // namespace

std::string VerbsFact() {
  VerbsReport r;
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
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
    r.devices.push_back(QueryDevice(list[i], warning));
    if (!warning.empty()) warnings.push_back(std::move(warning));
  }
  ibv_free_device_list(list);
  r.error = Join(warnings, "; ");
  return VerbsReportToJson(r);
}

}  // namespace commkit::topology
