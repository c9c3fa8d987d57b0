// The NCCL backend of the process-group API: device buffers on CUDA streams, Work completed by CUDA
// events, nonblocking communicators watched by a watchdog that aborts them within a bounded
// deadline. No NCCL/CUDA types here: streams are `void*` holding a cudaStream_t.
//
//   auto backend = CreateNcclBackend(context);            // Unavailable without driver/GPU
//   Registry::Default().Register(NcclBackendInfo());      // or let the registry do it
//
// Threads: Run/Split/coalescing from one thread at a time (ProcessGroup serialises them); Abort
// and Work methods from any thread; one watchdog thread per backend.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "commkit/comm/backend.h"
#include "commkit/comm/backend_info.h"

namespace commkit::comm::nccl {

struct NcclBackendOptions {
  // CUDA device of this rank. -1: BackendContext::device, else its local_rank, else LOCAL_RANK,
  // else the rank, modulo the number of visible devices.
  int device = -1;
  // Communicator creation (unique-id exchange + init); 0: the group's timeout.
  std::chrono::milliseconds init_timeout{0};
  // How long an abort may take before the watchdog reports it as hung (ncclCommAbort can hang).
  std::chrono::milliseconds abort_deadline{std::chrono::seconds(10)};
  std::chrono::milliseconds watchdog_poll{std::chrono::milliseconds(100)};
  // The stream for ops whose args.stream is null (a cudaStream_t; nullptr = the default stream).
  void* default_stream = nullptr;
  // ncclConfig_t knobs (defaults: NCCL's).
  std::string net_name;
  int min_ctas = -1;
  int max_ctas = -1;
  // Called once per process before its first NCCL communicator (set NCCL_* variables there). An
  // error fails backend creation. Overrides the process-wide hook when set. Without any hook, the
  // topology advisor runs: COMMKIT_NCCL_ADVICE=log (default) logs each NCCL_*/FI_* setting it would
  // make with its reason, =apply sets those the user has not set, =off skips the probe.
  std::function<Status()> before_first_communicator;
};

// Creates the backend: probes the runtime (Unavailable: no libcuda / no device), picks the device,
// exchanges the NCCL unique id through context.store, and creates a nonblocking communicator,
// bounded by the init timeout. Every rank of the group must call it.
Result<std::unique_ptr<Backend>> CreateNcclBackend(const BackendContext& context,
                                                   const NcclBackendOptions& options = {});

// Registry entry: name "nccl", MemoryKind::kDevice, availability and reason from the probe.
// Registry::Default() registers it by itself when this library is linked into the program (the
// exported C function commkit_register_nccl_backend). With -Wl,--as-needed a program must reference
// a symbol of this library (e.g. call NcclBackendInfo()) for it to stay linked.
BackendInfo NcclBackendInfo(const NcclBackendOptions& options = {});

// What NCCL can do: device memory only; all collectives; every DataType; SUM/PROD/MIN/MAX/AVG/
// PREMUL_SUM. BAND/BOR/BXOR are not supported (NCCL has no bitwise reductions).
bool NcclSupports(CollectiveKind kind, DataType dtype, MemoryKind memory, ReduceKind op);

// Process-wide hook run before the first communicator (see before_first_communicator).
void SetNcclPreInitHook(std::function<Status()> hook);

// NCCL extras on a Backend made by CreateNcclBackend (InvalidArgument for any other backend).
// Coalescing: collectives Run() between Start and End are issued in one ncclGroupStart/End; their
// Works complete together with the Work returned by End.
Status NcclStartCoalescing(Backend& backend);
Result<std::unique_ptr<Work>> NcclEndCoalescing(Backend& backend);
// Makes `stream` (a cudaStream_t) wait for the work on the GPU without blocking the CPU.
Status NcclWaitOnStream(Work& work, void* stream);

}  // namespace commkit::comm::nccl
