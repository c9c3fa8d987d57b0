// Status and Result<T>: how every expected failure travels in commkit.
//
// Expected failures (a missing library, absent hardware, a timeout, a peer that died, bad input)
// return Status or Result<T>; assertions (check.h) are for programmer errors only. Messages say who,
// what, where and what to do; each layer adds its context with WithContext() instead of logging.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "commkit/common/check.h"

namespace commkit {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,   // the caller passed something wrong; retrying the same call fails again
  kNotFound,          // a key, file, device or interface does not exist
  kAlreadyExists,
  kUnavailable,       // a library, device or service is not there (no driver, no libnccl, ...)
  kNotSupported,      // the backend or platform cannot do this combination, said up front
  kTimeout,           // a bounded wait ran out
  kRemoteError,       // a peer failed, disconnected or reported an error
  kMismatch,          // ranks disagree (different collectives, sizes, versions)
  kSystemError,       // an OS call failed (errno)
  kBackendError,      // a backend library (NCCL, MPI, Gloo) returned an error
  kPermissionDenied,  // authentication or permissions (wrong store token, ...)
  kAborted,           // the operation was cancelled or its communicator aborted
  kDataLoss,          // malformed or truncated data (files, wire messages)
  kInternal,          // a bug in commkit: please report
};

std::string_view ToString(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {StatusCode::kAlreadyExists, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status NotSupported(std::string msg) { return {StatusCode::kNotSupported, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status RemoteError(std::string msg) { return {StatusCode::kRemoteError, std::move(msg)}; }
  static Status Mismatch(std::string msg) { return {StatusCode::kMismatch, std::move(msg)}; }
  static Status SystemError(std::string msg) { return {StatusCode::kSystemError, std::move(msg)}; }
  // "<what>: <strerror(err)> (errno N)"
  static Status FromErrno(int err, std::string_view what);
  static Status BackendError(std::string msg) { return {StatusCode::kBackendError, std::move(msg)}; }
  static Status PermissionDenied(std::string msg) { return {StatusCode::kPermissionDenied, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status DataLoss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code name; empty for OK.
  const std::string& message() const;
  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;
  // "Timeout: rank 3/8: ..." or "OK".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  // Shared and immutable: copying a Status is cheap, OK costs one null pointer.
  std::shared_ptr<const State> state_;
};

// Result<T> holds a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "use Status, not Result<Status>");

 public:
  Result(T value) : data_(std::in_place_index<0>, std::move(value)) {}  // NOLINT implicit
  Result(Status status) : data_(std::in_place_index<1>, std::move(status)) {  // NOLINT implicit
    COMMKIT_CHECK(!std::get<1>(data_).ok(), "Result<T> constructed from an OK Status without a value");
  }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, T>>>
  Result(U&& value) : data_(std::in_place_index<0>, T(std::forward<U>(value))) {}  // NOLINT implicit

  bool ok() const { return data_.index() == 0; }
  Status status() const { return ok() ? Status() : std::get<1>(data_); }

  T& value() & {
    COMMKIT_CHECK(ok(), "Result::value() on an error: ", std::get<1>(data_).ToString());
    return std::get<0>(data_);
  }
  const T& value() const& {
    COMMKIT_CHECK(ok(), "Result::value() on an error: ", std::get<1>(data_).ToString());
    return std::get<0>(data_);
  }
  T&& value() && {
    COMMKIT_CHECK(ok(), "Result::value() on an error: ", std::get<1>(data_).ToString());
    return std::get<0>(std::move(data_));
  }
  T value_or(T fallback) const& { return ok() ? std::get<0>(data_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace commkit

#define COMMKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define COMMKIT_STATUS_CONCAT_(a, b) COMMKIT_STATUS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not OK.
#define COMMKIT_RETURN_IF_ERROR(expr)                                       \
  do {                                                                      \
    ::commkit::Status commkit_status_ = (expr);                             \
    if (!commkit_status_.ok()) return commkit_status_;                      \
  } while (false)

// COMMKIT_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error when MakeX() fails.
#define COMMKIT_ASSIGN_OR_RETURN(lhs, expr) \
  COMMKIT_ASSIGN_OR_RETURN_IMPL_(COMMKIT_STATUS_CONCAT_(commkit_result_, __LINE__), lhs, expr)
#define COMMKIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
