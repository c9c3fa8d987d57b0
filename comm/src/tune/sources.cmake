# The selection table (commkit/comm/tuning.h): rules from the built-in defaults, the probed topology,
# the calibration cache and COMMKIT_TUNE; every backend asks it which algorithm to run.
list(APPEND COMMKIT_COMM_SOURCES
  src/tune/spec.cc
  src/tune/defaults.cc
  src/tune/env_sources.cc
  src/tune/calibration.cc
  src/tune/table.cc
  src/tune/plan.cc)
list(APPEND COMMKIT_COMM_PRIVATE_DEPS commkit::topology nlohmann_json::nlohmann_json)
