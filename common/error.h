// dtrun's error hierarchy (the size of gloo's error.h) and the one check macro for syscalls.
//
// Synchronous APIs (store client, worker bootstrap, config parsing) throw these. A message names
// the key, peer or rank and the time waited, so a log line alone says what went wrong.
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dtrun {

/// Base of every error dtrun throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A deadline passed (store wait, connect, rendezvous).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A peer could not be reached or went away.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

/// A peer sent bytes that break the wire protocol.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// Bad user input: options, environment variables, files.
class ConfigError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] inline void throwSyscall(const char* call, int err, const char* file, int line) {
  throw Error(std::string(call) + " failed: " + std::strerror(err) + " (" + file + ":" +
              std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace dtrun

/// Evaluates a POSIX call; a result of -1 throws dtrun::Error with the call text and errno string.
#define DTRUN_SYSCALL(expr)                                                              \
  ([&]() {                                                                               \
    auto dtrunRc_ = (expr);                                                              \
    if (dtrunRc_ == -1) ::dtrun::detail::throwSyscall(#expr, errno, __FILE__, __LINE__); \
    return dtrunRc_;                                                                     \
  }())
