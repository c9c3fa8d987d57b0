// libibverbs prober: what ibv_query_port / ibv_query_gid_ex report, as plain data, and how it is
// merged into a ProbeReport where the sysfs prober (/sys/class/infiniband) is silent.
//
// The live side (VerbsFact) lives in src/probers/ibverbs_prober.cc, the only file that includes
// <infiniband/verbs.h>; it is compiled when COMMKIT_HAVE_IBVERBS and loads libibverbs.so.1 at run
// time. Without either, VerbsFact() records {"available": false} with the reason. The numeric codes below are the libibverbs ABI values, so the conversion is
// testable without the library or a device. All functions are pure and thread-safe except
// VerbsFact (opens each device once; no waits).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/topology/probe.h"

namespace commkit::topology {

struct VerbsGid {
  int index = 0;
  std::string gid;   // "fe80:0000:0000:0000:0000:0000:0000:0001" (sysfs spelling)
  int type = 0;      // enum ibv_gid_type: 0 IB, 1 RoCE v1, 2 RoCE v2
  std::string ndev;  // netdev for RoCE GIDs
};

struct VerbsPort {
  int port = 1;
  int state = 0;         // enum ibv_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER
  int phys_state = 0;    // 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, ...
  int link_layer = 0;    // 0 unspecified (= InfiniBand), 1 InfiniBand, 2 Ethernet
  int active_speed = 0;  // 1 SDR .. 128 NDR (per lane)
  int active_width = 0;  // 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x
  int active_mtu = 0;    // enum ibv_mtu: 1 = 256 .. 5 = 4096
  std::vector<VerbsGid> gids;  // populated entries only
};

struct VerbsDevice {
  std::string name;       // mlx5_0
  std::string node_guid;  // "0c42:a103:0065:8a3c"
  std::vector<VerbsPort> ports;
};

struct VerbsReport {
  bool available = false;  // libibverbs loaded and ibv_get_device_list answered
  std::string error;       // why not ("libibverbs not built in", "ibv_get_device_list: ...")
  std::vector<VerbsDevice> devices;  // empty on a machine without RDMA devices
};

// Sysfs spellings of the codes: "ACTIVE", "LinkUp", "InfiniBand"/"Ethernet", "IB/RoCE v1"/"RoCE v2".
std::string VerbsPortStateName(int state);
std::string VerbsPhysStateName(int phys_state);
std::string VerbsLinkLayerName(int link_layer);
std::string VerbsGidTypeName(int type);
// Line rate in Gb/s (per-lane speed x lanes): EDR 4x -> 100, HDR 4x -> 200; 0 when unknown.
double VerbsRateGbps(int active_speed, int active_width);
int VerbsMtuBytes(int active_mtu);  // 0 when unknown
NicPort ToNicPort(const VerbsPort& port);

// Live enumeration as JSON (never fails; absence is recorded with the reason). Recorded as the
// SystemView fact "verbs" so captures replay exactly.
std::string VerbsFact();
Result<VerbsReport> ParseVerbsFact(std::string_view json);
std::string VerbsReportToJson(const VerbsReport& report);

// Adds what verbs knows and sysfs did not: NIC nodes for devices sysfs did not list, ports missing
// from a NIC, empty port fields (state, link layer, rate, MTU), and GID entries (with type and
// netdev) not already in report.gids. Never overwrites a value sysfs gave. Returns how many facts
// were added.
int MergeVerbsReport(const VerbsReport& verbs, ProbeReport& report);

}  // namespace commkit::topology
