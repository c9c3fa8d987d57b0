list(APPEND COMMKIT_COMM_SOURCES src/net/socket.cc)
