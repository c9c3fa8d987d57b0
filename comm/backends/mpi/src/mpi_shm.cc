#include "mpi_shm.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm::mpi {

std::unique_ptr<ShmSlots> ShmSlots::Create(MPI_Comm comm, int rank, int size, std::size_t capacity,
                                           const std::string& group) {
  if (size < 2) return nullptr;
  CallGuard g;
  // Every rank sees the same answer: the node's share of the communicator is all of it or not.
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) return nullptr;
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  if (node_size != size) return nullptr;

  const std::size_t bytes = 2 * static_cast<std::size_t>(size) * (kHeaderBytes + capacity);
  char name[64] = {};
  shm::ShmSegment segment;
  std::string err;
  if (rank == 0) {
    static std::atomic<unsigned> counter{0};
    const auto t = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::snprintf(name, sizeof(name), "/commkit-mpi.%d.%u.%llx", static_cast<int>(getpid()), counter++, t);
    auto created = shm::ShmSegment::Create(name, bytes);
    if (created.ok()) {
      segment = std::move(*created);
    } else {
      err = created.status().ToString();
      name[0] = '\0';
    }
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
  if (rank != 0 && name[0] != '\0') {
    auto opened = shm::ShmSegment::Open(name, bytes);
    if (opened.ok()) {
      segment = std::move(*opened);
    } else {
      err = opened.status().ToString();
    }
  }
  if (rank != 0 && name[0] == '\0') err = "rank 0 could not create the segment";
  int ok = segment.data() != nullptr ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  // Every rank has mapped it (or given up): the name is no longer needed, and nothing is left in
  // /dev/shm if a rank dies later.
  segment.Unlink();
  if (!ok) {
    COMMKIT_LOG_WARN("mpi backend: group ", group, " runs without shared-memory slots (", err.empty() ? "another rank failed" : err,
                     "); small collectives and the mismatch check cost more");
    return nullptr;
  }
  return std::unique_ptr<ShmSlots>(new ShmSlots(std::move(segment), capacity, size));
}

ShmSlots::~ShmSlots() = default;

}  // namespace commkit::comm::mpi
