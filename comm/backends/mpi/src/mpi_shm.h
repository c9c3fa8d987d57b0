// Shared-memory slots for the ranks of one MPI communicator that all run on one node: every
// collective of the mpi backend first meets there (each rank publishes its call's fingerprint, and
// for small messages its data, and reads everyone's), which makes the cross-rank mismatch check free
// (Backend::ChecksMismatch) and small collectives cheaper than MPI's own (docs/mpi-backend.md).
// Private to commkit::comm_mpi.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "commkit/common/shm_segment.h"
#include "mpi_runtime.h"

namespace commkit::comm::mpi {

class ShmSlots {
 public:
  // A slot's header, on its own cache line. `seq` is written last (release) and read first (acquire):
  // a reader that sees the call's number sees its fingerprint, byte count and data.
  struct Header {
    std::uint64_t seq;
    std::uint64_t fingerprint;
    std::uint64_t bytes;
  };

  // Collective over `comm` (blocking MPI calls: creation only, like MPI_Comm_dup). Null when the
  // ranks are not all on this node, or when any rank could not map the segment (logged): the
  // backend then runs without it. `capacity`: data bytes per slot.
  static std::unique_ptr<ShmSlots> Create(MPI_Comm comm, int rank, int size, std::size_t capacity,
                                          const std::string& group);
  ~ShmSlots();
  ShmSlots(const ShmSlots&) = delete;
  ShmSlots& operator=(const ShmSlots&) = delete;

  // Two generations of slots, used by alternate calls: a rank writes generation g of call k only
  // after every rank published call k-1, which each did only after it finished reading call k-2
  // (generation g too). So no acknowledgement is needed.
  Header& header(int generation, int rank) const { return *reinterpret_cast<Header*>(Slot(generation, rank)); }
  char* data(int generation, int rank) const { return Slot(generation, rank) + kHeaderBytes; }
  std::size_t capacity() const { return capacity_; }

  // The `seq` of a rank that stopped waiting for the others in the call it published.
  static constexpr std::uint64_t kGaveUp = ~std::uint64_t{0};

  static std::uint64_t LoadSeq(const Header& h) {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(h.seq)).load(std::memory_order_acquire);
  }
  static void StoreSeq(Header& h, std::uint64_t seq) {
    std::atomic_ref<std::uint64_t>(h.seq).store(seq, std::memory_order_release);
  }

 private:
  static constexpr std::size_t kHeaderBytes = 64;
  ShmSlots(shm::ShmSegment segment, std::size_t capacity, int size)
      : segment_(std::move(segment)),
        capacity_(capacity),
        stride_(kHeaderBytes + capacity),
        size_(size) {}
  char* Slot(int generation, int rank) const {
    return reinterpret_cast<char*>(segment_.data()) + (static_cast<std::size_t>(generation) * static_cast<std::size_t>(size_) +
                    static_cast<std::size_t>(rank)) * stride_;
  }

  shm::ShmSegment segment_;
  std::size_t capacity_;
  std::size_t stride_;
  int size_;
};

}  // namespace commkit::comm::mpi
