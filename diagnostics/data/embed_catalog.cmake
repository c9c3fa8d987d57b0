# cmake -DINPUT=message_catalog.tsv -DOUTPUT=catalog_data.cc [-DNAME=kMessageCatalog] -P embed_catalog.cmake
# Embeds a generated data file of diagnostics/data as a byte array <NAME>Data of <NAME>Size bytes (a string
# literal would exceed what -Wpedantic accepts).
if(NOT NAME)
  set(NAME kMessageCatalog)
endif()
get_filename_component(_input_name "${INPUT}" NAME)
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from diagnostics/data/${_input_name} by embed_catalog.cmake.\n"
  "#include <cstddef>\n"
  "namespace commkit::diagnostics::explain {\n"
  "extern const unsigned char ${NAME}Data[];\n"
  "extern const std::size_t ${NAME}Size;\n"
  "const unsigned char ${NAME}Data[] = {\n${bytes}0};\n"
  "const std::size_t ${NAME}Size = ${size};\n"
  "}  // namespace commkit::diagnostics::explain\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
