# The collective algorithms over the point-to-point Transport (commkit/comm/algorithms/), used by the
# backends that build collectives from messages.
list(APPEND COMMKIT_COMM_SOURCES
  src/algorithms/algorithms.cc
  src/algorithms/ring.cc
  src/algorithms/recursive.cc
  src/algorithms/tree.cc
  src/algorithms/direct.cc)
