#include "dtrun/worker/error_file.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <typeinfo>

#include "common/error.h"
#include "common/file_util.h"
#include "common/torch_error_file.h"

namespace dtrun::worker {
namespace {

std::int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

}  // namespace

std::string currentStackTrace() {
  void* frames[64];
  int n = ::backtrace(frames, 64);
  std::unique_ptr<char*, void (*)(void*)> symbols(::backtrace_symbols(frames, n), std::free);
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "  #" + std::to_string(i) + " ";
    out += symbols ? symbols.get()[i] : "?";
    out += "\n";
  }
  return out;
}

ErrorRecord makeErrorRecord(std::string message) {
  ErrorRecord r;
  // torch's py_callstack is a formatted traceback that ends in "<Type>: <message>", and failure
  // reports show only the callstack; a native worker has the recording thread's stack instead,
  // followed by the same last line.
  r.callstack =
      "Stack of the thread that recorded the error:\n" + currentStackTrace() + message + "\n";
  r.message = std::move(message);
  r.timestamp = nowSeconds();
  return r;
}

ErrorRecord makeErrorRecord(const std::exception& e) {
  return makeErrorRecord(demangle(typeid(e).name()) + ": " + e.what());
}

std::string formatErrorRecord(const ErrorRecord& record) {
  // torch's bytes: json.dumps of its member order (message, extraInfo; py_callstack,
  // timestamp), without a trailing newline; invalid UTF-8 is replaced rather than allowed to
  // make the whole report unreadable.
  return dumpPythonStyle(
      makeTorchErrorRecord(record.message, record.callstack, record.timestamp, record.errorCode));
}

ErrorRecord parseErrorRecord(std::string_view text) {
  TorchErrorFile file;
  try {
    file = decodeTorchErrorFile(text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("error file: ") + e.what());
  }
  // A record needs its message: torch's format with message.message, or the string format.
  if (!file.message) {
    throw ConfigError("error file: \"message\" is neither a string nor {\"message\": <str>, ...}");
  }
  ErrorRecord r;
  r.message = std::move(*file.message);
  r.callstack = file.callstack.value_or("");
  r.timestamp = file.timestamp.value_or(0);
  r.errorCode = file.errorCode;
  return r;
}

void writeErrorFile(const std::string& path, const ErrorRecord& record) {
  writeWholeFile(path, formatErrorRecord(record), 0644, "error file");
}

bool recordError(const std::string& errorFile, const ErrorRecord& record) noexcept {
  if (errorFile.empty()) return false;
  try {
    writeErrorFile(errorFile, record);
    return true;
  } catch (...) {
    return false;
  }
}

bool recordError(const WorkerEnv& env, const ErrorRecord& record) noexcept {
  return recordError(env.errorFile, record);
}

}  // namespace dtrun::worker
