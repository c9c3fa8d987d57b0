// NcclComm: one NCCL communicator, created nonblocking, with every wait bounded by a deadline.
// Internal to the NCCL backend. No NCCL/CUDA header here: the handle types are forward-declared
// exactly as nccl.h / driver_types.h declare them.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commkit/comm/nccl/nccl_error.h"
#include "commkit/common/status.h"

typedef struct ncclComm* ncclComm_t;     // NOLINT: identical to nccl.h
typedef struct CUstream_st* cudaStream_t;  // NOLINT: identical to driver_types.h

namespace commkit::comm::nccl {

using Clock = std::chrono::steady_clock;

inline constexpr std::size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<char, kNcclUniqueIdBytes>;

struct NcclCommConfig {
  bool blocking = false;       // commkit default: nonblocking (abortable init and ops)
  std::string name;            // ncclConfig_t::commName (shows in NCCL logs / RAS)
  int min_ctas = -1;           // -1: NCCL's default
  int max_ctas = -1;
  int cga_cluster_size = -1;
  std::string net_name;        // force a net plugin/transport ("IB", "Socket"); empty = default
  bool split_share = false;    // share resources with the parent on split
};

// Makes `device` current for the scope and restores the caller's device afterwards (NCCL and CUDA
// calls need the communicator's device current; the caller's thread must not see it change).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

class NcclComm {
 public:
  // ncclGetUniqueId (rank 0 of a group; the id travels through the store).
  static Result<NcclUniqueIdBytes> NewUniqueId();

  // cudaSetDevice(device) + ncclCommInitRankConfig, polled until ready or `deadline`; on timeout the
  // half-built communicator is aborted (bounded by abort_deadline) and kTimeout returned.
  static Result<std::unique_ptr<NcclComm>> InitRank(const NcclUniqueIdBytes& id, int nranks, int rank,
                                                    int device, const NcclCommConfig& config,
                                                    Clock::time_point deadline,
                                                    std::chrono::milliseconds abort_deadline);

  // ncclCommSplit (collective over this communicator). color < 0: NCCL_SPLIT_NOCOLOR (returns a
  // null communicator: nullptr with OK).
  Result<std::unique_ptr<NcclComm>> Split(int color, int key, const NcclCommConfig& config,
                                          Clock::time_point deadline);

  ~NcclComm();  // bounded: aborts when finalize does not complete in time
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t raw() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  bool blocking() const { return blocking_; }
  const std::string& name() const { return name_; }

  // Non-blocking health: OK, or the mapped async error. ncclInProgress counts as OK.
  Status AsyncError() const;
  // Polls ncclCommGetAsyncError until it is not ncclInProgress (nonblocking comms after init,
  // split or a group end), bounded by `deadline`.
  Status WaitNotInProgress(NcclPhase phase, Clock::time_point deadline, std::string_view what) const;
  // Maps an NCCL return of an enqueue call; ncclInProgress is polled to completion first.
  Status CheckEnqueue(int result, std::string_view what, Clock::time_point deadline) const;

  // ncclCommAbort; idempotent. May hang in NCCL: callers bound it (see Watchdog).
  void Abort();
  // Aborts several communicators inside one ncclGroupStart/End (NCCL: communicators that hang
  // together must be aborted together).
  static void AbortGroup(const std::vector<NcclComm*>& comms);
  bool aborted() const;

  std::string Describe() const;

 private:
  NcclComm(ncclComm_t comm, int rank, int size, int device, bool blocking, std::string name)
      : comm_(comm), rank_(rank), size_(size), device_(device), blocking_(blocking), name_(std::move(name)) {}

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  bool blocking_ = false;
  std::string name_;
  mutable std::mutex abort_mutex_;
  bool aborted_ = false;
};

}  // namespace commkit::comm::nccl
