// The GPU side of commkit-bench for device backends (NCCL). One Device per rank: its CUDA
// device, one stream, device allocations, synchronous copies (inputs are written on the host and
// copied in; results are copied back and checked on the host), CUDA-event timing on the stream and
// CUDA graph capture. No CUDA types here: the stream is a `void*` holding a cudaStream_t.
//
// The CUDA runtime is linked the way the NCCL backend links it (statically; it dlopens libcuda
// itself), so commkit-bench starts on machines without a driver and Open() returns Unavailable with
// the reason. Builds without CUDA get the same Unavailable from device_none.cc.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "commkit/common/status.h"

namespace commkit::bench {

// A device allocation, freed (on its device) when the last copy goes.
using DeviceMemory = std::shared_ptr<void>;

class Device {
 public:
  // The CUDA device `local_rank` modulo the visible devices: selects it on the calling thread and
  // creates a non-blocking stream. Unavailable: not built with CUDA, no driver, no device.
  static Result<std::unique_ptr<Device>> Open(int local_rank);
  // Why Open() would fail on this machine, or OK (used to explain an unavailable backend early).
  static Status Probe();
  virtual ~Device() = default;

  virtual int index() const = 0;
  virtual std::string Describe() const = 0;  // "GPU 0 (NVIDIA H100 80GB HBM3), driver 13.0"
  virtual void* stream() const = 0;

  // At least one byte is allocated so that zero-size buffers still have a distinct address.
  virtual Result<DeviceMemory> Allocate(std::size_t bytes) = 0;
  // Synchronous with respect to the host (the stream is drained first).
  virtual Status CopyToDevice(void* device, const void* host, std::size_t bytes) = 0;
  virtual Status CopyToHost(void* host, const void* device, std::size_t bytes) = 0;
  // Waits for the stream, polling so that a hung collective is an error after `timeout`.
  virtual Status Synchronize(std::chrono::milliseconds timeout) = 0;

  // Event timing on the stream: Start, enqueue work, Stop, then ElapsedSeconds waits for the stop
  // event (bounded by `timeout`).
  virtual Status RecordStart() = 0;
  virtual Status RecordStop() = 0;
  virtual Result<double> ElapsedSeconds(std::chrono::milliseconds timeout) = 0;

  // CUDA graph capture of the stream (thread-local mode, so that other ranks' threads keep going):
  // everything enqueued between BeginCapture and EndCapture becomes one graph, launched by
  // LaunchGraph as often as wanted until the next capture.
  virtual Status BeginCapture() = 0;
  virtual Status EndCapture() = 0;
  virtual Status LaunchGraph() = 0;
};

}  // namespace commkit::bench
