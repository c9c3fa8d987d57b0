list(APPEND COMMKIT_COMM_SOURCES
  src/store/store.cc
  src/store/hash_store.cc)
