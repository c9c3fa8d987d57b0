// libfabric prober: fi_getinfo() for the EFA provider (AWS Elastic Fabric Adapter), as plain data,
// merged into a ProbeReport. The live side (LibfabricFact) is src/probers/libfabric_prober.cc, the
// only file that includes <rdma/fabric.h>, compiled when COMMKIT_HAVE_LIBFABRIC; it loads
// libfabric.so.1 at run time. Without either, the fact records {"available": false} with the reason. Pure functions are thread-safe; LibfabricFact calls
// fi_getinfo once (no waits).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/topology/probe.h"

namespace commkit::topology {

struct FabricDomain {
  std::string provider;  // "efa"
  std::string fabric;    // "efa" / "efa-direct"
  std::string domain;    // "rdmap16s27-rdm"
  std::string ep_type;   // "rdm", "dgram", "msg"
  std::string bus_id;    // "0000:10:1b.0" when the provider reports the NIC's PCI address
};

struct FabricReport {
  bool available = false;    // libfabric loaded and answered for the provider
  std::string version;       // "1.22" (library API version)
  std::string provider = "efa";
  std::string error;         // why not: "fi_getinfo(efa): No data available" (no EFA device)
  std::vector<FabricDomain> domains;
};

// Live fi_getinfo for `provider` (never fails; recorded as the SystemView fact "libfabric").
std::string LibfabricFact(const std::string& provider = "efa");
Result<FabricReport> ParseLibfabricFact(std::string_view json);
std::string FabricReportToJson(const FabricReport& report);

// The RDMA device name a domain belongs to: "rdmap16s27-rdm" -> "rdmap16s27".
std::string FabricDeviceName(const FabricDomain& domain);

// Marks EFA present, and adds a kEfa NIC node for each device sysfs did not list (by name, else by
// PCI bus id). Never changes what sysfs found. Returns the number of NIC nodes added.
int MergeFabricReport(const FabricReport& fabric, ProbeReport& report);

}  // namespace commkit::topology
