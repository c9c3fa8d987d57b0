# Backends compiled into commkit::comm; their third-party headers are included only here.
if(COMMKIT_HAVE_GLOO)
  list(APPEND COMMKIT_COMM_SOURCES src/backends/gloo/gloo_backend.cc)
  list(APPEND COMMKIT_COMM_PRIVATE_DEPS gloo)
endif()
