# commkit_embed_explain_data(<out_var>): the generated data files explain compiles in (the message
# catalog, scripts/gen_message_catalog.py, and the resemblance model, scripts/gen_explain_similarity.py;
# both committed under diagnostics/data) as C++ sources under <current binary dir>/generated, each a
# byte array made by embed_catalog.cmake. <out_var> receives the list of sources. Used by the
# diagnostics library and by the explain fuzz target, which compiles explain from its sources.
function(commkit_embed_explain_data out_var)
  set(_data_dir ${PROJECT_SOURCE_DIR}/diagnostics/data)
  set(_sources)
  foreach(_data IN ITEMS "message_catalog.tsv;kMessageCatalog" "similarity_model.tsv;kSimilarityModel")
    list(GET _data 0 _file)
    list(GET _data 1 _name)
    set(_cc ${CMAKE_CURRENT_BINARY_DIR}/generated/${_name}_data.cc)
    add_custom_command(OUTPUT ${_cc}
      COMMAND ${CMAKE_COMMAND} -DINPUT=${_data_dir}/${_file} -DOUTPUT=${_cc} -DNAME=${_name}
              -P ${_data_dir}/embed_catalog.cmake
      DEPENDS ${_data_dir}/${_file} ${_data_dir}/embed_catalog.cmake
      COMMENT "Embedding diagnostics/data/${_file}"
      VERBATIM)
    list(APPEND _sources ${_cc})
  endforeach()
  set(${out_var} ${_sources} PARENT_SCOPE)
endfunction()
