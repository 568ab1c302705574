#include "dtrun/worker/error_file.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <typeinfo>

#include "common/file_util.h"

namespace dtrun::worker {
namespace {

using nlohmann::json;

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

// torch writes the timestamp as a string in the record format and as a number in the
// alternative one, and reads it with int(); accept every spelling in both places.
std::int64_t timestampOf(const json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) return static_cast<std::int64_t>(v.get<double>());  // torch: int(x)
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    long long t = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end && *end == '\0' && errno == 0) return t;
  }
  throw ConfigError("error file: timestamp " + v.dump() + " is not an integer");
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
  // ordered_json keeps torch's member order (message, extraInfo; py_callstack, timestamp).
  nlohmann::ordered_json inner = {
      {"message", record.message},
      {"extraInfo",
       {{"py_callstack", record.callstack}, {"timestamp", std::to_string(record.timestamp)}}}};
  if (record.errorCode) inner["errorCode"] = *record.errorCode;
  // torch writes json.dumps(...) without a trailing newline; invalid UTF-8 is replaced rather
  // than allowed to make the whole report unreadable.
  return nlohmann::ordered_json{{"message", inner}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ErrorRecord parseErrorRecord(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("message")) {
    throw ConfigError("error file: not a JSON object with a \"message\" member");
  }
  ErrorRecord r;
  const json& message = doc["message"];
  if (message.is_string()) {  // {"message": "<str>", "timestamp": <int>}
    r.message = message.get<std::string>();
    if (doc.contains("timestamp")) r.timestamp = timestampOf(doc["timestamp"]);
    return r;
  }
  if (!message.is_object() || !message.contains("message") || !message["message"].is_string()) {
    throw ConfigError("error file: \"message\" is neither a string nor {\"message\": <str>, ...}");
  }
  r.message = message["message"].get<std::string>();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const json& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      r.callstack = extra["py_callstack"].get<std::string>();
    }
    if (extra.contains("timestamp")) r.timestamp = timestampOf(extra["timestamp"]);
  }
  if (message.contains("errorCode") && message["errorCode"].is_number_integer()) {
    r.errorCode = message["errorCode"].get<int>();
  }
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
