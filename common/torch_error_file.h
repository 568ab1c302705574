// torch's error file: the JSON a worker writes to $TORCHELASTIC_ERROR_FILE when it dies of an
// uncaught exception (torch's @record, torch/distributed/elastic/multiprocessing/errors/), which
// the agent reads after a failure and copies into its own error file. The one codec for both
// ends: worker_runtime writes it, the agent reads it.
//
//   record format: {"message": {"message": "ValueError: x",
//                               "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "17"},
//                               "errorCode": 1}}          (errorCode: added by the agent)
//   string format: {"message": "text", "timestamp": 17}
//
// The timestamp is read as torch's ProcessFailure reads it, with Python's int(): a file whose
// timestamp int() refuses is not an error file (torch raises on it). Files are written with
// Python's json.dumps separators and key order (ordered_json), so they are torch's bytes.
// Header-only JSON (nlohmann), which worker_runtime's installed library does not expose.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun {

/// An error file's document, keys in file order.
using ErrorJson = nlohmann::ordered_json;

/// What torch reads from an error file.
struct TorchErrorFile {
  ErrorJson document;         ///< the whole file
  bool recordFormat = false;  ///< "message" is an object (else the string format)
  /// The string format's message, or message.message when that is a string.
  std::optional<std::string> message;
  std::optional<std::string> callstack;   ///< message.extraInfo.py_callstack, when a string
  std::optional<std::int64_t> timestamp;  ///< seconds since the epoch; nullopt when absent
  std::optional<int> errorCode;           ///< message.errorCode, when an integer
};

/// Python's int() of a JSON value: an integer, a float (truncated), a boolean, or a string of
/// decimal digits (blanks around, one sign, single '_' between digits). nullopt where int()
/// raises (null, "17.0", "soon", a list) or the value does not fit int64. Pure.
std::optional<std::int64_t> pythonInt(const ErrorJson& value);

/// Decodes an error file's text. Throws ConfigError saying what is wrong (not JSON, not an
/// object with "message", a "message" neither a string nor an object, a timestamp int()
/// refuses); the caller names the file. Pure.
TorchErrorFile decodeTorchErrorFile(std::string_view text);

/// torch's record-format document: {"message": {"message": m, "extraInfo": {"py_callstack": cs,
/// "timestamp": "<s>"}[, "errorCode": e]}}. Pure.
ErrorJson makeTorchErrorRecord(const std::string& message, const std::string& callstack,
                               std::int64_t timestampS,
                               std::optional<int> errorCode = std::nullopt);

/// Serialises like Python's json.dumps(doc): ", " and ": " separators, ASCII only, invalid
/// UTF-8 replaced by U+FFFD. Pure.
std::string dumpPythonStyle(const ErrorJson& doc);

}  // namespace dtrun
