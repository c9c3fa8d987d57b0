// The commkit topology JSON format (schema "commkit.topology", version 1; docs/topology-json.md).
// LoadJson(ExportJson(t)) reproduces the model exactly (nodes, links, overrides, affinities,
// metadata). The optional "paths" section is derived data for consumers and ignored by LoadJson.
#pragma once

#include <string>
#include <string_view>

#include "commkit/common/status.h"
#include "commkit/topology/model.h"

namespace commkit::topology {

inline constexpr int kTopologyJsonVersion = 1;

struct JsonExportOptions {
  bool include_paths = true;  // add the GPU/NIC path matrix (labels, p2p, gdr, GB/s)
  int indent = 2;             // -1 = compact one line
};

std::string ExportJson(const Topology& topo, const JsonExportOptions& options = {});

// Parses and validates. DataLoss with origin:line for malformed JSON or wrong field types;
// NotSupported for a newer major version.
Result<Topology> LoadJson(std::string_view text, std::string_view origin = "<memory>");

}  // namespace commkit::topology
