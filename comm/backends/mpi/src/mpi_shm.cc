#include "mpi_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm::mpi {
namespace {

// Maps `name`, creating it (and reserving its memory, so a full /dev/shm fails here, not with a
// SIGBUS later) when `create`. Empty string on success, else what failed.
std::string Map(const std::string& name, std::size_t bytes, bool create, char** out) {
  const int fd = create ? shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return StrCat("shm_open(", name, "): ", std::strerror(errno));
  std::string err;
  if (create) {
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      err = StrCat("ftruncate(", name, ", ", bytes, "): ", std::strerror(errno));
    } else if (const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
      err = StrCat("posix_fallocate(", name, ", ", bytes, "): ", std::strerror(rc));
    }
  } else {
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes)
      err = StrCat(name, " is not ", bytes, " bytes long");
  }
  if (err.empty()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      err = StrCat("mmap(", name, "): ", std::strerror(errno));
    } else {
      *out = static_cast<char*>(p);
    }
  }
  close(fd);
  return err;
}

}  // namespace

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
  char* base = nullptr;
  std::string err;
  if (rank == 0) {
    static std::atomic<unsigned> counter{0};
    const auto t = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::snprintf(name, sizeof(name), "/commkit-mpi.%d.%u.%llx", static_cast<int>(getpid()), counter++, t);
    err = Map(name, bytes, /*create=*/true, &base);
    if (!err.empty()) {
      shm_unlink(name);
      name[0] = '\0';
    }
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
  if (rank != 0 && name[0] != '\0') err = Map(name, bytes, /*create=*/false, &base);
  if (rank != 0 && name[0] == '\0') err = "rank 0 could not create the segment";
  int ok = base != nullptr ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  // Every rank has mapped it (or given up): the name is no longer needed, and nothing is left in
  // /dev/shm if a rank dies later.
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (!ok) {
    if (base != nullptr) munmap(base, bytes);
    COMMKIT_LOG_WARN("mpi backend: group ", group, " runs without shared-memory slots (", err.empty() ? "another rank failed" : err,
                     "); small collectives and the mismatch check cost more");
    return nullptr;
  }
  return std::unique_ptr<ShmSlots>(new ShmSlots(base, bytes, capacity, size));
}

ShmSlots::~ShmSlots() { munmap(base_, bytes_); }

}  // namespace commkit::comm::mpi
