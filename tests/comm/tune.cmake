# The selection table (commkit/comm/tuning.h): grammar, precedence, deprecated variables, calibration
# cache, plan, and that a forced choice is what the host and gloo backends run.
commkit_add_test(comm_tune_test
  SOURCES tune_test.cc tune_calibration_test.cc tune_backends_test.cc
  LIBS commkit::comm nlohmann_json::nlohmann_json
  LABELS unit
  TIMEOUT 300)
