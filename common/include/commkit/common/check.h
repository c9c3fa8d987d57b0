// COMMKIT_CHECK: aborts with file:line and a message. For programmer errors only (broken invariants,
// misuse of an API contract); expected failures return Status (status.h).
#pragma once

#include <sstream>
#include <string>

namespace commkit::internal {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, const std::string& message);

template <typename... Args>
std::string CheckMessage(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace commkit::internal

#define COMMKIT_CHECK(cond, ...)                                                         \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ::commkit::internal::CheckFailed(__FILE__, __LINE__, #cond,                        \
                                       ::commkit::internal::CheckMessage(__VA_ARGS__)); \
    }                                                                                    \
  } while (false)
