#include "errors.h"

#include <c10/util/Exception.h>

#include "commkit/common/strings.h"

namespace commkit::torch_ext {

std::exception_ptr ToException(const Status& status) {
  try {
    C10_THROW_ERROR(DistBackendError, StrCat("commkit ", ToString(status.code()), ": ", status.message()));
  } catch (...) {
    return std::current_exception();
  }
}

void Throw(const Status& status) {
  if (status.code() == StatusCode::kInvalidArgument) C10_THROW_ERROR(ValueError, StrCat("commkit: ", status.message()));
  if (status.code() == StatusCode::kNotSupported)
    C10_THROW_ERROR(NotImplementedError, StrCat("commkit: ", status.message()));
  std::rethrow_exception(ToException(status));
}

}  // namespace commkit::torch_ext
