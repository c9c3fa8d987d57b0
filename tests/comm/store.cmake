commkit_add_test(comm_store_test
  SOURCES hash_store_test.cc
  LIBS commkit::comm
  LABELS unit)
