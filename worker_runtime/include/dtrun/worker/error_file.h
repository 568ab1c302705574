// Error files in torch's format
// (torch/distributed/elastic/multiprocessing/errors/error_handler.py), so that dtrun's failure
// report (and torchrun's) shows a native worker's error with its message and time:
//
//   {"message": {"message": "std::runtime_error: boom",
//                "extraInfo": {"py_callstack": "<stack>", "timestamp": "1700000000"}}}
//
// The agent reads $TORCHELASTIC_ERROR_FILE after a worker fails and may add message.errorCode.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "dtrun/worker/env.h"

namespace dtrun::worker {

/// One failure, as an error file holds it.
struct ErrorRecord {
  std::string message;           ///< message.message: "<type>: <what>" for exceptions
  std::string callstack;         ///< message.extraInfo.py_callstack (any text; a stack trace)
  std::int64_t timestamp = 0;    ///< message.extraInfo.timestamp: seconds since the epoch
  std::optional<int> errorCode;  ///< message.errorCode, which the agent adds from the exit code
};

/// A record of `message` stamped now, with the calling thread's stack as the callstack.
ErrorRecord makeErrorRecord(std::string message);
/// A record of `e`: message "<demangled type>: <what()>", stamped now, with the stack of the
/// calling thread (call it in the catch block).
ErrorRecord makeErrorRecord(const std::exception& e);

/// The record as torch's JSON, byte for byte as torch's json.dumps writes it: {"message":
/// {"message", "extraInfo": {"py_callstack", "timestamp" (a decimal string)}[, "errorCode"]}}.
std::string formatErrorRecord(const ErrorRecord& record);
/// Parses torch's record format (with message.message) or its alternative {"message": "<str>",
/// "timestamp": <int>}, reading the timestamp as torch does, with Python's int() (absent: 0).
/// Throws ConfigError for anything else, a timestamp int() refuses included.
ErrorRecord parseErrorRecord(std::string_view json);

/// Writes the record to `path`, replacing the file (as torch's mode "w"). Throws dtrun::Error
/// naming the path and the errno text.
void writeErrorFile(const std::string& path, const ErrorRecord& record);

/// Writes the record to `errorFile` when it is not empty. Never throws: it is meant for catch
/// blocks; returns true when the file was written.
bool recordError(const std::string& errorFile, const ErrorRecord& record) noexcept;
/// recordError(env.errorFile, record): TORCHELASTIC_ERROR_FILE of this worker.
bool recordError(const WorkerEnv& env, const ErrorRecord& record) noexcept;

/// The calling thread's stack, one frame a line (symbol names where the binary exports them).
std::string currentStackTrace();

}  // namespace dtrun::worker
