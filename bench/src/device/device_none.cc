// Device in a build without CUDA: every request says why there is no device memory.
#include "commkit/bench/device.h"

namespace commkit::bench {

Status Device::Probe() {
  return Status::Unavailable(
      "commkit-bench was built without CUDA (COMMKIT_WITH_CUDA=OFF or no toolkit found): no device memory");
}

Result<std::unique_ptr<Device>> Device::Open(int) { return Probe(); }

}  // namespace commkit::bench
