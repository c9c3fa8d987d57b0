if(COMMKIT_HAVE_GLOO)
  commkit_add_test(comm_pg_gloo_test
    SOURCES pg_gloo_test.cc
    LIBS commkit::comm
    LABELS unit
    TIMEOUT 600)
  commkit_add_test(comm_pg_fault_test
    SOURCES pg_fault_test.cc
    LIBS commkit::comm
    LABELS unit
    TIMEOUT 300)
  # The same suite with one rank per process, launched by commkit-run.
  foreach(n 2 3)
    add_test(NAME comm_pg_gloo_processes_${n}
      COMMAND ${PROJECT_BINARY_DIR}/bin/commkit-run -n ${n} --timeout 500 -- $<TARGET_FILE:comm_pg_gloo_test> --gtest_color=no)
    set_tests_properties(comm_pg_gloo_processes_${n} PROPERTIES LABELS mp TIMEOUT 600
      ENVIRONMENT "COMMKIT_TEST_PROCESSES=1")
  endforeach()
endif()

if(COMMKIT_HAVE_MPI AND TARGET commkit_comm_mpi)
  commkit_add_test(comm_pg_mpi_test
    SOURCES pg_mpi_test.cc
    LIBS commkit::comm commkit::comm_mpi
    LABELS unit
    TIMEOUT 600)
  foreach(n 2 4)
    add_test(NAME comm_pg_mpi_processes_${n}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${n} $<TARGET_FILE:comm_pg_mpi_test> --gtest_color=no)
    set_tests_properties(comm_pg_mpi_processes_${n} PROPERTIES LABELS mp TIMEOUT 600
      ENVIRONMENT "COMMKIT_TEST_PROCESSES=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
  endforeach()
endif()
