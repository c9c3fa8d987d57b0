# Backends compiled into commkit::comm; their third-party headers are included only here.
if(COMMKIT_HAVE_GLOO)
  list(APPEND COMMKIT_COMM_SOURCES src/backends/gloo/gloo_backend.cc)
  list(APPEND COMMKIT_COMM_PRIVATE_DEPS gloo)
endif()

# commkit's own shared-memory host backend (no third-party library; Linux shm + futex).
list(APPEND COMMKIT_COMM_SOURCES
  src/backends/host/shm_segment.cc
  src/backends/host/host_transport.cc
  src/backends/host/host_backend.cc)
if(COMMKIT_HAVE_UCX)
  # Between hosts the host backend talks UCX (ucp tagged messages).
  list(APPEND COMMKIT_COMM_SOURCES
    src/backends/host/ucx_transport.cc
    src/backends/host/host_remote.cc)
  # Across hosts the all-reduce algorithm is chosen with the topology cost model.
  list(APPEND COMMKIT_COMM_PRIVATE_DEPS PkgConfig::UCX commkit::topology)
endif()
