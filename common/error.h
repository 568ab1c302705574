// dtrun's error hierarchy (the size of gloo's error.h).
//
// Synchronous APIs (store client, worker bootstrap, config parsing) throw these. A message names
// the key, peer or rank and the time waited, so a log line alone says what went wrong; a failed
// system call reads "<what could not be done, naming the file or peer>: <strerror>".
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

}  // namespace dtrun
