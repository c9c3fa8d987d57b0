# cmake -DINPUT=message_catalog.tsv -DOUTPUT=catalog_data.cc -P embed_catalog.cmake
# Embeds the message catalog as a byte array (a string literal would exceed what -Wpedantic accepts).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from diagnostics/data/message_catalog.tsv by embed_catalog.cmake.\n"
  "#include <cstddef>\n"
  "namespace commkit::diagnostics::explain {\n"
  "extern const unsigned char kMessageCatalogData[];\n"
  "extern const std::size_t kMessageCatalogSize;\n"
  "const unsigned char kMessageCatalogData[] = {\n${bytes}0};\n"
  "const std::size_t kMessageCatalogSize = ${size};\n"
  "}  // namespace commkit::diagnostics::explain\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
