// Slurm hostlist expansion: "gpu-[01-03,7],cpu[1-2]-ib" -> gpu-01 gpu-02 gpu-03 gpu-7 cpu1-ib cpu2-ib.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/common/status.h"

namespace commkit {

// Expands a Slurm hostlist expression (comma-separated hosts, each with any number of bracketed
// range lists; zero padding kept as written). InvalidArgument on bad syntax (unbalanced brackets,
// reversed or non-numeric ranges) or when the expansion would exceed `max_hosts`.
Result<std::vector<std::string>> ExpandHostlist(std::string_view expression, std::size_t max_hosts = 1 << 20);

}  // namespace commkit
