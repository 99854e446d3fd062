// Errors that cross layer boundaries.
//
// CompileError: the input is valid PyTorch but coil cannot (yet) compile it, or the input is
//   malformed (an unknown op, an unsupported dtype, a bad text graph). The Python glue catches
//   it and runs the graph eagerly with a one-line reason (strict mode re-raises).
// InternalError: a bug in coil. Also caught at the Python boundary so the user's program keeps
//   running, but reported loudly.
//
// Both record where they were raised. Throw them through the stream macros:
//   COIL_USER_CHECK(cond) << "unsupported dtype " << name;
//   COIL_CHECK(cond) << "buffer has no producer";
#pragma once

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace coil {

class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// `file` (a __FILE__) from the repository's src/ or include/ on: the messages name the same
// place whatever the build directory or machine ("/abs/checkout/src/x.cpp", "../../src/x.cpp").
inline const char* source_relative(const char* file) {
  for (const char* p = file; *p; ++p) {
    const bool at_start = p == file || p[-1] == '/';
    if (at_start && (std::strncmp(p, "src/", 4) == 0 || std::strncmp(p, "include/", 8) == 0))
      return p;
  }
  return file;
}

// Collects a message and throws on destruction; used only through the macros below.
template <typename E>
class ErrorStream {
 public:
  ErrorStream(const char* file, int line, const char* cond) {
    msg_ << source_relative(file) << ":" << line << ": ";
    if (cond) msg_ << "check failed (" << cond << "): ";
  }
  template <typename T>
  ErrorStream& operator<<(const T& v) {
    msg_ << v;
    return *this;
  }
  [[noreturn]] ~ErrorStream() noexcept(false) { throw E(msg_.str()); }

 private:
  std::ostringstream msg_;
};

}  // namespace detail
}  // namespace coil

#define COIL_USER_CHECK(cond) \
  if (cond) {                 \
  } else                      \
    ::coil::detail::ErrorStream<::coil::CompileError>(__FILE__, __LINE__, nullptr)
#define COIL_CHECK(cond) \
  if (cond) {            \
  } else                 \
    ::coil::detail::ErrorStream<::coil::InternalError>(__FILE__, __LINE__, #cond)
#define COIL_UNSUPPORTED() \
  ::coil::detail::ErrorStream<::coil::CompileError>(__FILE__, __LINE__, nullptr)
#define COIL_INTERNAL_ERROR() \
  ::coil::detail::ErrorStream<::coil::InternalError>(__FILE__, __LINE__, nullptr)
