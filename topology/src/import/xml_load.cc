#include "import/xml_load.h"

#include "commkit/common/strings.h"
#include "commkit/common/text.h"

namespace commkit::topology::internal {

Status LoadXml(pugi::xml_document& doc, std::string_view text, std::string_view origin) {
  pugi::xml_parse_result pr = doc.load_buffer(text.data(), text.size(), pugi::parse_default, pugi::encoding_utf8);
  if (pr) return Status::Ok();
  return Status::DataLoss(StrCat(origin, ":", LineOfOffset(text, pr.offset), ": not well-formed XML (", pr.description(),
                                 "); check the file is complete"));
}

}  // namespace commkit::topology::internal
