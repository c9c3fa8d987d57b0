list(APPEND COMMKIT_COMM_SOURCES
  src/store/store.cc
  src/store/hash_store.cc)
list(APPEND COMMKIT_COMM_SOURCES
  src/store/tcp_store_server.cc
  src/store/tcp_store_client.cc
  src/store/tcp_store_ops.cc)
list(APPEND COMMKIT_COMM_SOURCES
  src/store/prefix_store.cc
  src/store/file_store.cc)
list(APPEND COMMKIT_COMM_SOURCES src/store/etcd_store.cc)
list(APPEND COMMKIT_COMM_PRIVATE_DEPS nlohmann_json::nlohmann_json)
