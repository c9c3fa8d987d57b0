// Reusing the Work of an operation that completed on the caller's thread (private to commkit::comm).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "commkit/comm/work.h"

namespace commkit {

// When `work` was made by CompletedWork() with an OK status (a backend that finishes inside Run()),
// gives it the group's sequence number and duration and returns it: ProcessGroup hands the caller
// the backend's Work instead of allocating a second one that says the same. Such a Work holds no
// reference to the backend, so it may outlive the group like any other. Otherwise returns nullptr
// and leaves `work` as it was.
std::unique_ptr<Work> ReuseCompletedWork(std::unique_ptr<Work>& work, std::uint64_t sequence,
                                         std::chrono::nanoseconds duration);

}  // namespace commkit
