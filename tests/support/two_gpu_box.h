// A small hand-built topology shared by the topology, export and CLI tests: one CPU (NUMA 0), a
// PCIe Gen4 x16 switch with two GPUs (SM 80) and an InfiniBand NIC `mlx5_0`, and optionally an NV12
// link between the GPUs and one NIC port.
#pragma once

#include <optional>
#include <string>

#include "commkit/topology/model.h"

namespace commkit::testing {

struct TwoGpuBoxOptions {
  bool nvlink = true;
  std::string gpu_name;                          // empty: none recorded
  std::optional<topology::NicPort> nic_port;     // none: the NIC has no port
};

inline topology::Topology TwoGpuBox(const TwoGpuBoxOptions& options = {}) {
  using namespace commkit::topology;
  Topology t;
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  cpu.cpu.numa_id = 0;
  const NodeId c = t.AddNode(cpu);
  Node sw;
  sw.kind = NodeKind::kPciSwitch;
  sw.parent = c;
  sw.pci.bus_id = "0000:10:00.0";
  sw.pci.link = {4, 16, 4, 16};
  const NodeId s = t.AddNode(sw);
  NodeId gpus[2];
  for (int i = 0; i < 2; ++i) {
    Node g;
    g.kind = NodeKind::kGpu;
    g.parent = s;
    g.label = "GPU" + std::to_string(i);
    g.gpu.index = i;
    g.gpu.sm = 80;
    g.gpu.name = options.gpu_name;
    g.pci.bus_id = "0000:1" + std::to_string(i + 1) + ":00.0";
    g.pci.link = {4, 16, 4, 16};
    gpus[i] = t.AddNode(g);
  }
  Node nic;
  nic.kind = NodeKind::kNic;
  nic.parent = s;
  nic.label = "mlx5_0";
  nic.nic.name = "mlx5_0";
  nic.nic.kind = NicKind::kInfiniBand;
  nic.pci.bus_id = "0000:13:00.0";
  if (options.nic_port) nic.nic.ports.push_back(*options.nic_port);
  t.AddNode(nic);
  if (options.nvlink) t.AddLink({LinkKind::kNvLink, gpus[0], gpus[1], 12, 0, 0, ""});
  return t;
}

}  // namespace commkit::testing
