// How commkit's failures reach Python: a failed commkit Status becomes a c10 error, which torch's
// exception translation turns into the matching Python exception. Invalid arguments raise ValueError,
// unsupported combinations NotImplementedError, everything else (mismatch, timeout, dead rank, remote
// error) torch.distributed.DistBackendError carrying commkit's full message.
#pragma once

#include <exception>

#include "commkit/common/status.h"

namespace commkit::torch_ext {

// The exception a failed operation completes its Work with (DistBackendError; "commkit <Code>: ...").
std::exception_ptr ToException(const Status& status);
// Throws the exception a failed call raises (ValueError / NotImplementedError / DistBackendError).
[[noreturn]] void Throw(const Status& status);

}  // namespace commkit::torch_ext
