commkit_add_test(comm_store_test
  SOURCES store_contract_instances_test.cc
  LIBS commkit::comm
  LABELS unit)
commkit_add_test(comm_tcp_store_test
  SOURCES tcp_store_test.cc
  LIBS commkit::comm
  LABELS unit
  TIMEOUT 300)
