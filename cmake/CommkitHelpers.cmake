# Helpers shared by every module: one library target per module, tools, tests.

set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

set(COMMKIT_WARNINGS -Wall -Wextra -Wpedantic -Wundef -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 reports false positives inside std::regex and std::function at -O2; clang has no such option
# and warns about it on every source (the fuzz build).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND COMMKIT_WARNINGS -Wno-maybe-uninitialized)
endif()
if(COMMKIT_WERROR)
  list(APPEND COMMKIT_WARNINGS -Werror)
endif()

# commkit_add_module(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates the shared library commkit_<name>, alias commkit::<name>, with public headers in
# <module>/include/commkit/<name>/ (installed to include/commkit/<name>/).
function(commkit_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target commkit_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  add_library(commkit::${name} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY COMMKIT_MODULE_TARGETS ${target})  # for CommkitPkgConfig.cmake
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME commkit_${name}
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_options(${target} PRIVATE ${COMMKIT_WARNINGS})
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(COMMKIT_INSTALL)
    install(TARGETS ${target} EXPORT commkitTargets
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
      RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endfunction()

# commkit_add_backend(<name> BUILTIN|LIBRARY SOURCES ... [PRIVATE_DEPS ...])
# A process-group backend in comm/backends/<name>/: public headers in include/commkit/comm/<name>/
# (namespace commkit::comm::<name>), sources in src/. BUILTIN compiles it into commkit::comm (for
# backends every program may use without asking: the registry lists them directly); LIBRARY makes the
# shared library commkit::comm_<name> on top of commkit::comm, so only programs that link it load the
# third-party library (it registers itself through an exported hook, see comm/src/pg/registry.cc).
function(commkit_add_backend name)
  cmake_parse_arguments(ARG "BUILTIN;LIBRARY" "" "SOURCES;PRIVATE_DEPS" ${ARGN})
  if((ARG_BUILTIN AND ARG_LIBRARY) OR (NOT ARG_BUILTIN AND NOT ARG_LIBRARY))
    message(FATAL_ERROR "commkit_add_backend(${name}): give exactly one of BUILTIN or LIBRARY")
  endif()
  if(ARG_LIBRARY)
    commkit_add_module(comm_${name} SOURCES ${ARG_SOURCES} PUBLIC_DEPS commkit::comm PRIVATE_DEPS ${ARG_PRIVATE_DEPS})
    return()
  endif()
  list(TRANSFORM ARG_SOURCES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
  target_sources(commkit_comm PRIVATE ${ARG_SOURCES})
  target_include_directories(commkit_comm PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>)
  target_link_libraries(commkit_comm PRIVATE ${ARG_PRIVATE_DEPS})
  if(COMMKIT_INSTALL)
    install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endfunction()

# commkit_add_tool(<name> SOURCES ... [DEPS ...]): a command-line program, installed to bin/.
function(commkit_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${COMMKIT_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  if(COMMKIT_INSTALL)
    install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endfunction()

# commkit_add_test(<name> SOURCES ... [LIBS ...] [LABELS unit|mp|netns|corpus|gpu ...] [TIMEOUT s]
#                  [ENVIRONMENT VAR=value ...] [RESOURCE_LOCK name])
# One GoogleTest executable registered as one CTest test (gtest filters stay usable by hand).
function(commkit_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;RESOURCE_LOCK" "SOURCES;LIBS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT ARG_LABELS)
    message(FATAL_ERROR "commkit_add_test(${name}): give LABELS (unit, mp, netns, corpus or gpu)")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${COMMKIT_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} commkit_test_main)
  if(TARGET commkit_test_pch)  # tests/CMakeLists.txt: GoogleTest and friends, precompiled once
    target_precompile_headers(${name} REUSE_FROM commkit_test_pch)
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  set(env "COMMKIT_FIXTURES_DIR=${COMMKIT_FIXTURES_DIR}"
          "COMMKIT_BIN_DIR=${PROJECT_BINARY_DIR}/bin"
          "COMMKIT_TEST_DATA_DIR=${PROJECT_SOURCE_DIR}/tests/data"
          ${ARG_ENVIRONMENT})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${env}" SKIP_RETURN_CODE 77)
  if(ARG_RESOURCE_LOCK)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ${ARG_RESOURCE_LOCK})
  endif()
endfunction()

# Configure summary: commkit_summary_line(<what> <state> <why>) records a row.
function(commkit_summary_line what state why)
  set_property(GLOBAL APPEND PROPERTY COMMKIT_SUMMARY_ROWS "${what}|${state}|${why}")
endfunction()

function(commkit_print_summary)
  get_property(rows GLOBAL PROPERTY COMMKIT_SUMMARY_ROWS)
  message(STATUS "")
  message(STATUS "commkit ${PROJECT_VERSION} configuration summary")
  message(STATUS "  build type: ${CMAKE_BUILD_TYPE}   sanitizers: ${COMMKIT_SANITIZE}   tests: ${COMMKIT_BUILD_TESTS}")
  message(STATUS "  fixtures (corpus tests): ${COMMKIT_FIXTURES_DIR}")
  message(STATUS "  ---------------------------------------------------------------------------")
  foreach(row IN LISTS rows)
    string(REPLACE "|" ";" cols "${row}")
    list(GET cols 0 what)
    list(GET cols 1 state)
    list(GET cols 2 why)
    string(LENGTH "${what}" len)
    math(EXPR pad "12 - ${len}")
    if(pad LESS 1)
      set(pad 1)
    endif()
    string(REPEAT " " ${pad} spaces)
    string(LENGTH "${state}" slen)
    math(EXPR spad "5 - ${slen}")
    if(spad LESS 1)
      set(spad 1)
    endif()
    string(REPEAT " " ${spad} sspaces)
    message(STATUS "  ${what}${spaces}${state}${sspaces}${why}")
  endforeach()
  message(STATUS "  ---------------------------------------------------------------------------")
  message(STATUS "")
endfunction()
