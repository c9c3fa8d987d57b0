# Run by the CTest comm_pg_mpi_rank_dies (tests/comm/pg.cmake; not a fragment: this directory is outside
# tests/comm/CMakeLists.txt's *.cmake glob): what happens to a job whose rank dies inside a collective under
# Open MPI's mpirun (`cmake -DMPIEXEC=... -DTEST_BIN=... -DSTORE_DIR=... -P mpi_rank_dies.cmake`).
#
# PgMpiRankDies.SurvivorsAreEndedByMpirun (pg_mpi_test.cc) runs on 3 ranks; rank 1 calls _exit(7)
# inside allreduce #2. Measured with Debian's Open MPI 4.1.4: ORTE aborts the job at once (the
# survivors get SIGCONT and SIGTERM, then SIGKILL), prints "mpirun (or mpiexec) detected that one or more processes
# exited with non-zero status ... Exit code: 7" and exits with 7, the dead rank's status; the
# survivors' collective never returns. This checks exactly that, and that the job ends within
# LIMIT seconds (mpirun itself is killed after LIMIT + 30 s: nothing hangs).
if(NOT DEFINED LIMIT)
  set(LIMIT 60)
endif()
file(REMOVE_RECURSE "${STORE_DIR}")
math(EXPR hard_limit "${LIMIT} + 30")
string(TIMESTAMP start "%s" UTC)
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env COMMKIT_TEST_MPI_RANK_DIES=1 COMMKIT_TEST_MPI_STORE_DIR=${STORE_DIR}
          ${MPIEXEC} --allow-run-as-root --oversubscribe -np 3
          ${TEST_BIN} --gtest_filter=PgMpiRankDies.* --gtest_color=no
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out
  TIMEOUT ${hard_limit})
string(TIMESTAMP end "%s" UTC)
math(EXPR elapsed "${end} - ${start}")
file(REMOVE_RECURSE "${STORE_DIR}")
message("${out}")
message("mpirun exit status: ${rc}; elapsed ${elapsed} s")
set(problems "")
if(NOT rc STREQUAL "7")
  string(APPEND problems "\n  mpirun exited with '${rc}', expected 7 (the dead rank's exit code)")
endif()
if(NOT out MATCHES "rank 1: _exit\\(7\\) inside allreduce #2")
  string(APPEND problems "\n  rank 1 never reached allreduce #2 (the test did not run as intended)")
endif()
if(NOT out MATCHES "(mpirun|mpiexec) detected that one or more processes exited with non-zero status")
  string(APPEND problems "\n  mpirun's abort message is missing")
endif()
if(out MATCHES "mpirun did not end the job")
  string(APPEND problems "\n  a surviving rank's collective returned: mpirun no longer aborts the job when a rank dies")
endif()
if(elapsed GREATER LIMIT)
  string(APPEND problems "\n  the job took ${elapsed} s to end (limit ${LIMIT} s)")
endif()
if(problems)
  message(FATAL_ERROR "comm_pg_mpi_rank_dies:${problems}")
endif()
