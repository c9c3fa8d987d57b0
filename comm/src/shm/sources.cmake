# The shared-memory transport of the ranks of one host (shm_transport.h): the host backend's engine
# within a host and the mpi and gloo backends' meeting before every collective (slot_meeting.h), and
# reading a peer's memory directly (single_copy.h). Internal: comm_mpi includes
# the header privately (comm/backends/mpi/CMakeLists.txt); it is not installed.
list(APPEND COMMKIT_COMM_SOURCES src/shm/shm_transport.cc src/shm/slot_meeting.cc src/shm/single_copy.cc)
