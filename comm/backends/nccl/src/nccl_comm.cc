#include "nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit::comm::nccl {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL_UNIQUE_ID_BYTES changed");

// Sleep between polls: short first (init usually completes quickly), then capped.
void Backoff(int& round) {
  auto us = std::chrono::microseconds(std::min(10000, 50 << std::min(round, 8)));
  ++round;
  std::this_thread::sleep_for(us);
}

ncclConfig_t MakeConfig(const NcclCommConfig& c) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = c.blocking ? 1 : 0;
  if (!c.name.empty()) config.commName = c.name.c_str();
  if (c.min_ctas > 0) config.minCTAs = c.min_ctas;
  if (c.max_ctas > 0) config.maxCTAs = c.max_ctas;
  if (c.cga_cluster_size >= 0) config.cgaClusterSize = c.cga_cluster_size;
  if (!c.net_name.empty()) config.netName = c.net_name.c_str();
  if (c.split_share) config.splitShare = 1;
  return config;
}

Status CudaStatus(cudaError_t err, std::string_view where) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return MapCudaError(err, cudaGetErrorName(err), cudaGetErrorString(err), where);
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) status_ = CudaStatus(cudaSetDevice(device), StrCat("cudaSetDevice(", device, ")"));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Result<NcclUniqueIdBytes> NcclComm::NewUniqueId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return MapNcclResult(r, NcclPhase::kInit, "ncclGetUniqueId", ncclGetLastError(nullptr));
  }
  NcclUniqueIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, kNcclUniqueIdBytes);
  return bytes;
}

Result<std::unique_ptr<NcclComm>> NcclComm::InitRank(const NcclUniqueIdBytes& id, int nranks, int rank,
                                                     int device, const NcclCommConfig& cfg,
                                                     Clock::time_point deadline,
                                                     std::chrono::milliseconds abort_deadline) {
  std::string where = StrCat("NCCL communicator '", cfg.name, "' rank ", rank, "/", nranks, " on cuda:", device);
  DeviceGuard guard(device);
  COMMKIT_RETURN_IF_ERROR(guard.status().WithContext(where));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = MakeConfig(cfg);
  ncclComm_t raw = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&raw, nranks, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string last = ncclGetLastError(raw);
    if (raw != nullptr) ncclCommAbort(raw);
    return MapNcclResult(r, NcclPhase::kInit, where, last);
  }
  std::unique_ptr<NcclComm> comm(new NcclComm(raw, rank, nranks, device, cfg.blocking, cfg.name));
  Status ready = comm->WaitNotInProgress(NcclPhase::kInit, deadline, where);
  if (!ready.ok()) {
    // The communicator is nonblocking, so abort is allowed (and needed: peers may be missing).
    // Bound it: abort on a helper thread; if it hangs, leak the handle rather than block the caller.
    ncclComm_t handle = comm->comm_;
    comm->aborted_ = true;  // the destructor must not touch it again
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([handle, done] {
      ncclCommAbort(handle);
      done->store(true);
    }).detach();
    auto abort_by = Clock::now() + abort_deadline;
    int round = 0;
    while (!done->load() && Clock::now() < abort_by) Backoff(round);
    if (!done->load()) {
      ready = Status(ready.code(), StrCat(ready.message(), "; ncclCommAbort did not finish within ",
                                          abort_deadline.count(), " ms (leaked)"));
    }
    return ready;
  }
  return comm;
}

Result<std::unique_ptr<NcclComm>> NcclComm::Split(int color, int key, const NcclCommConfig& cfg,
                                                  Clock::time_point deadline) {
  std::string where = StrCat(Describe(), ": split(color=", color, ", key=", key, ")");
  DeviceGuard guard(device_);
  COMMKIT_RETURN_IF_ERROR(guard.status().WithContext(where));
  ncclConfig_t config = MakeConfig(cfg);
  // Nonblocking split: NCCL keeps the handle's address and stores the new communicator there from its
  // own thread when the split completes (it stays NULL until then). So the slot lives on the heap and
  // is freed only once the split is known to be over; a split still running at the deadline leaks it.
  auto* slot = new ncclComm_t(nullptr);
  ncclResult_t r = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    delete slot;
    return MapNcclResult(r, NcclPhase::kSplit, where, ncclGetLastError(comm_));
  }
  // While a nonblocking split runs, the parent reports ncclInProgress; ncclCommSplit itself may
  // already have returned ncclSuccess (NCCL 2.28 returns the child's setup result, not the group's).
  if (r == ncclInProgress || !blocking_) {
    Status parent = WaitNotInProgress(NcclPhase::kSplit, deadline, where);
    if (!parent.ok()) {
      if (parent.code() != StatusCode::kTimeout) delete slot;
      return parent;
    }
  }
  ncclComm_t raw = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  delete slot;
  if (raw == nullptr) return std::unique_ptr<NcclComm>();  // NOCOLOR
  int rank = 0;
  int size = 0;
  std::unique_ptr<NcclComm> child(new NcclComm(raw, 0, 0, device_, cfg.blocking, cfg.name));
  COMMKIT_RETURN_IF_ERROR(child->WaitNotInProgress(NcclPhase::kSplit, deadline, where));
  if (ncclCommUserRank(raw, &rank) != ncclSuccess || ncclCommCount(raw, &size) != ncclSuccess) {
    return Status::BackendError(StrCat(where, ": cannot query the new communicator's rank/size: ",
                                       ncclGetLastError(raw)));
  }
  child->rank_ = rank;
  child->size_ = size;
  return child;
}

NcclComm::~NcclComm() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (comm_ == nullptr || aborted_) return;
  // Orderly teardown: finalize (flushes outstanding work), bounded; destroy; abort on failure.
  DeviceGuard guard(device_);
  ncclResult_t r = ncclCommFinalize(comm_);
  bool finalized = (r == ncclSuccess);
  if (r == ncclInProgress) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    ncclResult_t state = ncclInProgress;
    int round = 0;
    while (Clock::now() < deadline) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
      Backoff(round);
    }
    finalized = (state == ncclSuccess);
  }
  if (finalized) {
    ncclCommDestroy(comm_);
  } else {
    COMMKIT_LOG_WARN(Describe(), ": finalize did not complete cleanly; aborting the communicator");
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

Status NcclComm::AsyncError() const {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return MapNcclResult(r, NcclPhase::kAsync, Describe(), ncclGetLastError(comm_));
  if (state == ncclSuccess || state == ncclInProgress) return Status::Ok();
  return MapNcclResult(state, NcclPhase::kAsync, Describe(), ncclGetLastError(comm_));
}

Status NcclComm::WaitNotInProgress(NcclPhase phase, Clock::time_point deadline, std::string_view what) const {
  int round = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return MapNcclResult(r, phase, what, ncclGetLastError(comm_));
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return MapNcclResult(state, phase, what, ncclGetLastError(comm_));
    if (Clock::now() >= deadline) {
      return Status::Timeout(StrCat(what, ": NCCL still in progress after the timeout (", ToString(phase),
                                    "); a peer has not joined or is stuck. Check that every rank "
                                    "reached this point, NCCL_SOCKET_IFNAME, and run gpudoctor"));
    }
    Backoff(round);
  }
}

Status NcclComm::CheckEnqueue(int result, std::string_view what, Clock::time_point deadline) const {
  if (result == ncclSuccess) return Status::Ok();
  if (result == ncclInProgress) return WaitNotInProgress(NcclPhase::kEnqueue, deadline, what);
  return MapNcclResult(result, NcclPhase::kEnqueue, what, ncclGetLastError(comm_));
}

void NcclComm::Abort() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (comm_ == nullptr || aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

void NcclComm::AbortGroup(const std::vector<NcclComm*>& comms) {
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<ncclComm_t> handles;
  for (NcclComm* c : comms) {
    if (c == nullptr) continue;
    std::unique_lock<std::mutex> lock(c->abort_mutex_);
    if (c->comm_ == nullptr || c->aborted_) continue;
    c->aborted_ = true;
    handles.push_back(c->comm_);
    locks.push_back(std::move(lock));
  }
  if (handles.empty()) return;
  if (handles.size() == 1) {
    ncclCommAbort(handles[0]);
    return;
  }
  ncclGroupStart();
  for (ncclComm_t h : handles) ncclCommAbort(h);
  ncclGroupEnd();
}

bool NcclComm::aborted() const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  return aborted_;
}

std::string NcclComm::Describe() const {
  return StrCat("NCCL communicator '", name_, "' rank ", rank_, "/", size_, " on cuda:", device_);
}

}  // namespace commkit::comm::nccl
