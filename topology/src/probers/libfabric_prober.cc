// Live libfabric query (compiled only when COMMKIT_HAVE_LIBFABRIC): fi_getinfo for one provider.
// No device -> {"available": false, "error": "fi_getinfo(efa): No data available"}.
// libfabric.so.1 is loaded at run time (optional_library.h); <rdma/fabric.h> gives the types,
// constants and signatures only, so nothing here may call a libfabric function by name.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstring>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/topology/libfabric.h"
#include "probers/optional_library.h"

namespace commkit::topology {
namespace {

struct Api {
  decltype(&::fi_version) version = nullptr;
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;  // fi_allocinfo() is fi_dupinfo(nullptr)
  decltype(&::fi_strerror) strerror = nullptr;
};

Result<Api> LoadApi() {
  COMMKIT_ASSIGN_OR_RETURN(DynamicLibrary lib, OpenOptionalLibrary(kLibfabric));
  Api a;
  for (const Status& s : {lib.Bind(a.version, "fi_version"), lib.Bind(a.getinfo, "fi_getinfo"),
                          lib.Bind(a.freeinfo, "fi_freeinfo"), lib.Bind(a.dupinfo, "fi_dupinfo"),
                          lib.Bind(a.strerror, "fi_strerror")})
    if (!s.ok()) return MissingSymbol(kLibfabric, s);
  lib.Leak();  // providers it loads keep pointers into it
  return a;
}

std::string EpTypeName(fi_ep_type t) {
  switch (t) {
    case FI_EP_RDM: return "rdm";
    case FI_EP_DGRAM: return "dgram";
    case FI_EP_MSG: return "msg";
    default: return StrCat("type", static_cast<int>(t));
  }
}

}  // namespace

std::string LibfabricFact(const std::string& provider) {
  FabricReport r;
  r.provider = provider;
  auto api = LoadApi();
  if (!api.ok()) {
    r.error = api.status().message();
    return FabricReportToJson(r);
  }
  const uint32_t lib = api->version();
  r.version = StrCat(FI_MAJOR(lib), ".", FI_MINOR(lib));
  fi_info* hints = api->dupinfo(nullptr);
  if (!hints) {
    r.error = "fi_allocinfo failed (out of memory)";
    return FabricReportToJson(r);
  }
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // freed by fi_freeinfo
  fi_info* info = nullptr;
  const int rc = api->getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info);
  api->freeinfo(hints);
  if (rc != 0) {
    r.error = StrCat("fi_getinfo(", provider, "): ", api->strerror(-rc),
                     rc == -FI_ENODATA ? " (no device for this provider, or the provider is not installed)" : "");
    return FabricReportToJson(r);
  }
  r.available = true;
  std::set<std::string> seen;
  for (fi_info* cur = info; cur; cur = cur->next) {
    FabricDomain d;
    d.provider = cur->fabric_attr && cur->fabric_attr->prov_name ? cur->fabric_attr->prov_name : provider;
    d.fabric = cur->fabric_attr && cur->fabric_attr->name ? cur->fabric_attr->name : "";
    d.domain = cur->domain_attr && cur->domain_attr->name ? cur->domain_attr->name : "";
    d.ep_type = cur->ep_attr ? EpTypeName(cur->ep_attr->type) : "";
    if (cur->nic && cur->nic->bus_attr && cur->nic->bus_attr->bus_type == FI_BUS_PCI) {
      const fi_pci_attr& p = cur->nic->bus_attr->attr.pci;
      char bdf[16];
      std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.%x", p.domain_id, p.bus_id, p.device_id, p.function_id);
      d.bus_id = bdf;
    }
    if (d.domain.empty() || !seen.insert(d.domain + "/" + d.ep_type).second) continue;
    r.domains.push_back(std::move(d));
  }
  api->freeinfo(info);
  return FabricReportToJson(r);
}

}  // namespace commkit::topology
