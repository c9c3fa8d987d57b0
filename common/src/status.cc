#include "commkit/common/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commkit/common/strings.h"

namespace commkit {

std::string_view ToString(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kRemoteError: return "RemoteError";
    case StatusCode::kMismatch: return "Mismatch";
    case StatusCode::kSystemError: return "SystemError";
    case StatusCode::kBackendError: return "BackendError";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<const State>(State{code, std::move(message)});
}

Status Status::FromErrno(int err, std::string_view what) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return Status(StatusCode::kSystemError, StrCat(what, ": ", text, " (errno ", err, ")"));
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(state_->code, StrCat(context, ": ", state_->message));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return StrCat(commkit::ToString(state_->code), ": ", state_->message);
}

namespace internal {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "[commkit F %s:%d] check failed: %s%s%s\n", file, line, condition,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal
}  // namespace commkit
