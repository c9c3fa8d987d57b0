// The mpi backend's meeting in the shared-memory slots (comm/src/shm/slot_meeting.h): its creation
// (MPI collectives are the exchange) and what a failed meeting means for the group.
#include "commkit/common/cpu_cache.h"
#include "mpi_backend_impl.h"

namespace commkit::comm::mpi {

namespace {

// ShmTransport's creation-time exchange over `comm`: every rank's string, by MPI_Allgather(v)
// (blocking, like MPI_Comm_dup at group creation).
ShmExchange MpiExchange(MPI_Comm comm, int size) {
  return [comm, size](std::string_view step, const std::string& mine) -> Result<std::vector<std::string>> {
    CallGuard g;
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    int rc = MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm);
    if (rc != MPI_SUCCESS) return Status::BackendError(StrCat("MPI_Allgather (", step, "): ", MpiError(rc)));
    int total = 0;
    for (int q = 0; q < size; ++q) {
      displs[q] = total;
      total += lens[q];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    rc = MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm);
    if (rc != MPI_SUCCESS) return Status::BackendError(StrCat("MPI_Allgatherv (", step, "): ", MpiError(rc)));
    std::vector<std::string> out;
    for (int q = 0; q < size; ++q)
      out.push_back(all.substr(static_cast<std::size_t>(displs[q]), static_cast<std::size_t>(lens[q])));
    return out;
  };
}

}  // namespace

std::unique_ptr<SlotMeeting> MpiBackend::ConnectShm() {
  if (size_ < 2) return nullptr;
  {
    // Every rank sees the same answer: the node's share of the communicator is all of it or not.
    CallGuard g;
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) != MPI_SUCCESS) return nullptr;
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    if (node_size != size_) return nullptr;
  }
  ShmTransportOptions options;
  options.slot_bytes = SlotMeeting::SlotBytesFor(size_);
  options.ring_bytes = 0;  // send/recv go over MPI
  // Waits spin as long as the backend's others (COMMKIT_MPI_SPIN_US), except with more ranks than
  // cores: the transport then yields and sleeps instead, since a spinning rank keeps the awaited one
  // off the core (4 ranks on 2 cores: 107 µs per 8-byte all-reduce spinning for 100 µs, 4 µs yielding).
  options.spin = spin_;
  options.label = "mpi backend";
  options.rotate_from = RotateFromFor(ThisCpuVendor());
  // Every step's outcome is exchanged before any rank acts on it: all ranks get the transport, or
  // none does.
  auto t = ShmTransport::Connect(rank_, size_, group_, MpiExchange(comm_, size_), options);
  if (!t.ok()) {
    COMMKIT_LOG_WARN("mpi backend: group ", group_, " runs without shared-memory slots (", t.status().message(),
                     "); small collectives and the mismatch check cost more");
    return nullptr;
  }
  return SlotMeeting::Create(std::move(t).value(), MpiExchange(comm_, size_), StrCat("mpi backend: group ", group_),
                             "MPI");
}

Status MpiBackend::Meet(const CollectiveArgs& a, const void* data, std::size_t bytes, double scale, std::size_t most) {
  Status s = shm_->Meet(a, data, bytes, scale, most, DeadlineFor(a));
  if (s.ok()) return s;
  if (s.code() == StatusCode::kMismatch)
    return s.WithContext(StrCat(ToString(a.kind), " #", a.sequence, " (seen in the shared-memory slots)"));
  // A failed wait has told the peers (the transport marks this rank as having given up: a late rank
  // then fails instead of completing a call the others abandoned, and ranks still waiting fail at
  // once); the group is unusable from here on.
  Status st = s.WithContext(StrCat(ToString(a.kind), " #", a.sequence, " on group ", group_));
  MarkUnusable(st);
  return st;
}

Status MpiBackend::ReadGather(const CollectiveArgs& a) {
  SlotMeeting::GatherOffsets(a, size_, offsets_);
  const void* input = SlotMeeting::GatherInput(a, offsets_, rank_);
  const PeerBuffer announce = SlotMeeting::Announce(input);
  COMMKIT_RETURN_IF_ERROR(Meet(a, &announce, sizeof announce, 1, sizeof announce));
  return AfterPeerReads(shm_->ReadGather(a, input, offsets_, DeadlineFor(a)));
}

Status MpiBackend::AfterPeerReads(Status s) {
  if (!s.ok()) {
    // A read failed on this rank only, or a wait did: the ranks no longer agree on this call.
    Status st = s.WithContext(StrCat("on group ", group_));
    MarkUnusable(st);
    return st;
  }
  tune::NoteRun("mpi", CollectiveAlgorithm::kSingleCopy);
  return Status::Ok();
}

}  // namespace commkit::comm::mpi
