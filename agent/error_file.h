// Error files: the JSON a worker writes to $TORCHELASTIC_ERROR_FILE when it dies of an uncaught
// exception (torch's @record), and the copy the agent writes to its own error file (torch/
// distributed/elastic/multiprocessing/errors/error_handler.py).
//
// Two formats are accepted, as torch accepts them:
//   record format: {"message": {"message": "ValueError: x",
//                               "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "17"}}}
//   string format: {"message": "text", "timestamp": 17}
// A worker controls these bytes, so reading never throws on bad content: a malformed file becomes
// a message naming the file. Key order is preserved (ordered_json) and files are written with
// Python's json.dumps separators, so a file dtrun writes is byte-for-byte what torch would write.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dtrun::agent {

/// What the failure report needs from one error file.
struct ErrorFileContents {
  /// The report's traceback text, not yet indented: py_callstack, else message.message, else
  /// "<N/A>" (record format); the string itself (string format); for a malformed file, a
  /// sentence naming the file and what is wrong with it.
  std::string message;
  /// The file's timestamp in epoch seconds; empty when the file has none or is malformed.
  std::optional<std::int64_t> timestampS;
  /// True when the file parsed and had a usable "message".
  bool valid = false;
  /// The parsed document, keys in file order (null when malformed); copied into the agent's file.
  nlohmann::ordered_json document;
};

/// Reads `path`. Empty when no regular file exists there; never throws for bad content (see
/// ErrorFileContents::valid). Blocking (one small local file); any thread.
std::optional<ErrorFileContents> readErrorFile(const std::string& path);

/// torch's record-format document: {"message": {"message": m, "extraInfo": {"py_callstack": cs,
/// "timestamp": "<s>"}}}. Pure.
nlohmann::ordered_json makeErrorRecord(const std::string& message, const std::string& callstack,
                                       std::int64_t timestampS);

/// `doc` with message.errorCode = exitCode, as torch's dump_error_file does: unchanged when
/// exitCode is 0 or "message" is not an object. Pure.
nlohmann::ordered_json withErrorCode(nlohmann::ordered_json doc, int exitCode);

/// Serialises like Python's json.dumps(doc): ", " and ": " separators, ASCII only, invalid
/// UTF-8 replaced by U+FFFD. Pure.
std::string dumpPythonStyle(const nlohmann::ordered_json& doc);

/// Writes `doc` to `path` the way torch writes the agent's error file: removes any existing file
/// first, then writes dumpPythonStyle(doc). Blocking; throws dtrun::Error naming the path.
void writeErrorFile(const std::string& path, const nlohmann::ordered_json& doc);

}  // namespace dtrun::agent
