list(APPEND COMMKIT_COMM_SOURCES
  src/launch/hostlist.cc
  src/launch/launch_env.cc
  src/launch/rendezvous.cc
  src/launch/job_store.cc
  src/launch/run_generation.cc)
