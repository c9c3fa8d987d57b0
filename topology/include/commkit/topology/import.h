// Importers: build a Topology from files other tools write. Malformed or truncated input returns
// DataLoss naming the origin and line; importers never crash on hostile input.
//
// Implemented: NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE), hwloc XML, nvidia-smi topo -m and
// topo -p2p text. NCCL graph XML (<graphs>)
// is recognised and rejected as "a graph file, not a topology". Other formats are detected and
// reported as NotSupported until their importers land.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "commkit/common/status.h"
#include "commkit/topology/model.h"

namespace commkit::topology {

enum class TopologyFormat : std::uint8_t {
  kUnknown, kNcclXml, kNcclGraphXml, kHwlocXml, kNvsmiMatrix, kNvsmiP2p, kJson,
};
std::string_view ToString(TopologyFormat format);

// Sniffs the format from the content (not the file name).
TopologyFormat DetectTopologyFormat(std::string_view text);

// NCCL topology XML. `origin` names the input in messages (a path or "<memory>").
// GPUs: <pci class=0x03xxxx> (index from <gpu dev>, else order of appearance); NICs: class 0x02xxxx
// or <nic><net>; switches: class 0x0604xx or any <pci> with children; NVSwitches: class 0x0680xx
// from vendor 0x10de, or nvlink targets with tclass 0x068000. <pci> without class (NCCL reads it
// from sysfs) become kOtherPci with a note in the metadata.
Result<Topology> ImportNcclXml(std::string_view text, std::string_view origin = "<memory>");

// hwloc XML (v1/v2, `lstopo --of xml`): Packages -> CPUs, host bridges, PCI switches (bridge ports
// collapsed like NCCL: even-depth bridges are switches), GPUs (NVIDIA display class or cuda/nvml
// OSDev), NICs (network class or mlx5/eth/ib OSDev), NVSwitches, NVLinkBandwidth distances as links.
Result<Topology> ImportHwlocXml(std::string_view text, std::string_view origin = "<memory>");

// `nvidia-smi topo -m` text (old/new legends, mlx5_N or NIC# columns with a NIC Legend, tabs or
// spaces, CPU/NUMA affinity columns, SOC read as SYS). There is no tree in this format: every
// off-diagonal cell becomes a PathOverride so ComputePaths() reproduces the matrix exactly.
Result<Topology> ImportNvsmiMatrix(std::string_view text, std::string_view origin = "<memory>");
// `nvidia-smi topo -p2p r|w|n|a` text: GPUs plus P2pOverride cells (mode from the command line
// echo when present, else 'r').
Result<Topology> ImportNvsmiP2p(std::string_view text, std::string_view origin = "<memory>");

// Detects the format and imports. Reads at most 64 MiB.
Result<Topology> ImportTopologyText(std::string_view text, std::string_view origin = "<memory>");
Result<Topology> ImportTopologyFile(const std::filesystem::path& path);

}  // namespace commkit::topology
