// Parsing an XML text a user or a machine gave (hwloc XML, NCCL topology XML) with one error shape:
// "<origin>:<line>: not well-formed XML (<why>); check the file is complete". Private to topology.
#pragma once

#include <string_view>

#include <pugixml.hpp>

#include "commkit/common/status.h"

namespace commkit::topology::internal {

// Loads `text` (UTF-8) into `doc`; DataLoss naming origin and line when it is not well-formed.
Status LoadXml(pugi::xml_document& doc, std::string_view text, std::string_view origin);

}  // namespace commkit::topology::internal
