// hwloc prober: the machine as hwloc (Debian libhwloc, 2.x) sees it, recorded as hwloc v2 XML and
// merged into a ProbeReport where it adds information over the sysfs walker: NUMA nodes with their
// memory and CPU sets, packages (sockets), the NUMA locality of PCI devices whose sysfs numa_node
// is -1 (VMs), and GPUs/NICs (with their bridges and OS device names) that sysfs did not show.
//
// Live side (HwlocSnapshotLive) is src/probers/hwloc_prober.cc, the only file that includes
// <hwloc.h>, compiled when COMMKIT_HAVE_HWLOC; it loads libhwloc.so.15 at run time. Without either,
// the snapshot says why ("built without hwloc", "libhwloc.so.15 not available: ...").
// hwloc reads the real machine ("/"): a live SystemView with another root skips hwloc. Replay goes
// through the hwloc XML importer (import.h) plus ReadHwlocLocality, so captures replay without
// hwloc installed. Pure functions are thread-safe; HwlocSnapshotLive loads the topology once (no
// waits; tens of milliseconds).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/topology/probe.h"

namespace commkit::topology {

struct HwlocSnapshot {
  bool available = false;  // hwloc loaded the topology and exported it
  std::string version;     // library version ("2.9.0")
  std::string error;       // why not ("hwloc_topology_load: Permission denied")
  std::string xml;         // hwloc v2 XML (`lstopo --of xml` equivalent, I/O objects included)
};

// Loads this machine's topology with I/O devices (bridges kept when they lead to devices) and
// exports it as v2 XML. Never fails: errors land in `error` with available=false.
HwlocSnapshot HwlocSnapshotLive();
// The status half of a snapshot (everything but xml) as the JSON fact "hwloc", and back.
std::string HwlocStatusToJson(const HwlocSnapshot& snapshot);
Status ParseHwlocStatus(std::string_view json, HwlocSnapshot& out);

struct HwlocNuma {
  int os_index = -1;
  int package = -1;               // os_index of the enclosing Package (v1 Socket); -1 none
  std::string cpuset;             // hwloc bitmap text ("0x00ffffff,0x0")
  std::string cpulist;            // "0-23,48-71"
  std::uint64_t memory_bytes = 0;
};

struct HwlocPciLocality {
  std::string bus_id;             // canonical
  std::vector<int> numa;          // NUMA os indexes of the nearest non-I/O ancestor's nodeset
  std::string cpulist;            // its cpuset as a list
};

struct HwlocLocality {
  std::string version;            // Machine info "hwlocVersion" when present
  int packages = 0;
  std::vector<HwlocNuma> numa;    // sorted by os_index
  std::vector<HwlocPciLocality> pci;
};

// NUMA nodes, packages and per-PCI-device locality from hwloc XML (v1 or v2). DataLoss naming
// origin:line on malformed XML.
Result<HwlocLocality> ReadHwlocLocality(std::string_view xml, std::string_view origin = "<memory>");

// Set bits of an hwloc bitmap string ("0x00000003", "0xf...f,0x00000001", "0x0"); at most
// `limit` indexes (infinite sets are cut there). Empty for unparsable text.
std::vector<int> HwlocBitmapIndexes(std::string_view bitmap, int limit = 65536);
// {0,1,2,5} -> "0-2,5".
std::string IndexesToList(const std::vector<int>& indexes);

struct HwlocMergeStats {
  int numa_nodes = 0;         // NUMA nodes hwloc reported
  int numa_filled = 0;        // CPU/NUMA facts sysfs lacked (memory, cpu lists, new NUMA nodes)
  int devices_localized = 0;  // devices whose NUMA node came from hwloc (sysfs said -1)
  int nodes_added = 0;        // GPUs/NICs/NVSwitches (and bridges above them) sysfs did not show
  int names_added = 0;        // netdev/RDMA/GPU names hwloc's OS devices added to known devices
};

// Merges hwloc's XML into a report the sysfs/network/RDMA passes filled: matches PCI devices by bus
// id (never duplicates one), fills report.numa / report.locality / system.packages, re-parents a
// host bridge under the CPU node hwloc places it at when sysfs did not know its NUMA node, and
// records each change in topology metadata notes ("hwloc: ..."). Errors only for malformed XML.
Result<HwlocMergeStats> MergeHwloc(std::string_view xml, ProbeReport& report, std::string_view origin = "hwloc fact");

}  // namespace commkit::topology
