// What each recorded fact of a snapshot/capture looks like (SystemView::Fact). A replay checks a
// fact against its schema before handing it to a check or prober, so a damaged or edited snapshot
// is reported as unreadable instead of being read as a different answer (an address list with junk
// appended is not "resolves to a routable address").
#pragma once

#include <string_view>

#include "commkit/common/status.h"

namespace commkit {

// Ok when `value` fits the schema of fact `name`; DataLoss saying what is wrong otherwise. Every fact
// is text without NUL bytes; facts a producer writes as "error: <why>" may always hold that. Facts
// with no specific schema (dmesg, hwloc.xml) are checked only as text; JSON facts (nvml, cuda, hwloc,
// verbs, libfabric) must be one JSON object whose non-integer numbers are finite and within ±2^31,
// because their readers convert them to int.
Status ValidateFact(std::string_view name, std::string_view value);

}  // namespace commkit
