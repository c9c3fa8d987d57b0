commkit_add_test(comm_store_test
  SOURCES store_contract_instances_test.cc
  LIBS commkit::comm
  LABELS unit)
commkit_add_test(comm_tcp_store_test
  SOURCES tcp_store_test.cc
  LIBS commkit::comm
  LABELS unit
  TIMEOUT 300)
commkit_add_test(comm_etcd_store_test
  SOURCES etcd_store_test.cc
  LIBS commkit::comm
  LABELS mp
  TIMEOUT 300
  ENVIRONMENT "COMMKIT_ETCD=$<$<BOOL:${COMMKIT_HAVE_ETCD}>:${ETCD_EXECUTABLE}>")
commkit_add_test(comm_store_mp_test
  SOURCES store_mp_test.cc
  LIBS commkit::comm
  LABELS mp
  TIMEOUT 120)
