// Cloud machines whose vendors publish NCCL settings for them (Azure ND-series, AWS p4d/p5, GCP
// A3), recognised from what a probe or an imported topology file shows, with the vendor's settings
// and where each is published.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "commkit/topology/probe.h"

namespace commkit::topology::internal {

struct PresetSetting {
  std::string variable;
  std::string value;
  std::string why;     // one line
  std::string source;  // URL of the vendor's published setting
};

struct PlatformMatch {
  std::string name;      // "Azure ND A100 v4"
  std::string evidence;  // what identified it: "DMI product_name p4d.24xlarge", "8 A100 GPUs + 8 InfiniBand HCAs ..."
  std::vector<PresetSetting> settings;
  std::vector<std::string> notes;  // advice that is not a variable, each ending with its source
};

// The platform `report` describes, when it is one of the documented ones. Live probes and captures
// identify it by DMI (AWS puts the instance type in product_name; Azure and GCP only their names, so
// the GPU model and NIC set decide the size); an imported topology file by its devices alone (EFA
// NICs are AWS-only; Azure's Hyper-V places each GPU and HCA on its own PCI domain).
std::optional<PlatformMatch> RecognisePlatform(const ProbeReport& report);

}  // namespace commkit::topology::internal
