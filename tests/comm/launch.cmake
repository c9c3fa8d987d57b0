commkit_add_test(comm_launch_env_test
  SOURCES launch_env_test.cc launch_rendezvous_test.cc
  LIBS commkit::comm
  LABELS unit)
