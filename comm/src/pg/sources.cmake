list(APPEND COMMKIT_COMM_SOURCES
  src/pg/types.cc
  src/pg/work.cc
  src/pg/reduce_kernels.cc
  src/pg/registry.cc
  src/pg/validate.cc
  src/pg/executor.cc
  src/pg/health.cc
  src/pg/mismatch.cc
  src/pg/process_group.cc
  src/pg/builtin_backends.cc
  src/pg/flight_clock.cc
  src/pg/flight_recorder.cc
  src/pg/flight_dump.cc
  src/pg/metrics.cc)
list(APPEND COMMKIT_COMM_PRIVATE_DEPS ${CMAKE_DL_LIBS})
list(APPEND COMMKIT_COMM_PRIVATE_DEPS nlohmann_json::nlohmann_json)
