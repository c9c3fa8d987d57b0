if(COMMKIT_HAVE_GLOO)
  commkit_add_test(comm_pg_gloo_test
    SOURCES pg_gloo_test.cc
    LIBS commkit::comm
    LABELS unit
    TIMEOUT 600)
endif()
if(COMMKIT_HAVE_GLOO)
  commkit_add_test(comm_pg_fault_test
    SOURCES pg_fault_test.cc
    LIBS commkit::comm
    LABELS unit
    TIMEOUT 300)
endif()
