// Error files as the agent handles them: the file a worker wrote to $TORCHELASTIC_ERROR_FILE,
// read for the failure report, and the copy the agent writes to its own error file (torch/
// distributed/elastic/multiprocessing/errors/error_handler.py). The format is torch's, decoded
// and written by common/torch_error_file.h.
//
// A worker controls these bytes, so reading never throws on bad content: a malformed file becomes
// a message naming the file. A file whose timestamp torch's int() refuses is malformed (torch's
// agent raises on it); a record without a timestamp, or without extraInfo, is read, with no time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/torch_error_file.h"

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

/// `doc` with message.errorCode = exitCode, as torch's dump_error_file does: unchanged when
/// exitCode is 0 or "message" is not an object. Pure.
nlohmann::ordered_json withErrorCode(nlohmann::ordered_json doc, int exitCode);

/// Writes `doc` to `path` the way torch writes the agent's error file: removes any existing file
/// first, then writes dumpPythonStyle(doc). Blocking; throws dtrun::Error naming the path.
void writeErrorFile(const std::string& path, const nlohmann::ordered_json& doc);

}  // namespace dtrun::agent
