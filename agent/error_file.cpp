#include "agent/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/error.h"
#include "common/file_util.h"

namespace dtrun::agent {

namespace {

using Json = nlohmann::ordered_json;

// A traceback is a few KiB; anything this large is not an error file a worker meant to write.
constexpr std::size_t kMaxErrorFileBytes = 16 * 1024 * 1024;

// torch does int(x) on the timestamp: a JSON integer, a float (truncated) or a decimal string.
std::optional<std::int64_t> parseTimestamp(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) return static_cast<std::int64_t>(v.get<double>());
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  auto b = s.find_first_not_of(" \t\n\r");
  auto e = s.find_last_not_of(" \t\n\r");
  if (b == std::string::npos) return std::nullopt;
  const char* first = s.data() + b;
  const char* last = s.data() + e + 1;
  if (*first == '+') ++first;  // int("+5") == 5; from_chars rejects '+'
  std::int64_t out = 0;
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return out;
}

ErrorFileContents malformed(const std::string& path, const std::string& why) {
  ErrorFileContents c;
  c.message = "Failed to parse error file " + path + ": " + why;
  return c;
}

// Reads the whole file, or returns false with `why` set.
bool slurp(const std::string& path, std::string& out, std::string& why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::strerror(errno);
    return false;
  }
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > kMaxErrorFileBytes) {
      why = "larger than " + std::to_string(kMaxErrorFileBytes) + " bytes";
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

void dumpInto(const Json& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += Json(it.key()).dump(-1, ' ', true, Json::error_handler_t::replace);
      out += ": ";
      dumpInto(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& v : j) {
      if (!first) out += ", ";
      first = false;
      dumpInto(v, out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', true, Json::error_handler_t::replace);
  }
}

}  // namespace

std::optional<ErrorFileContents> readErrorFile(const std::string& path) {
  struct stat st {};
  // os.path.isfile: follows symlinks; anything but a regular file counts as "no error file".
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;

  std::string text;
  std::string why;
  if (!slurp(path, text, why)) return malformed(path, why);

  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    return malformed(path, e.what());
  }
  if (!doc.is_object() || !doc.contains("message")) {
    return malformed(path, "no \"message\" field");
  }

  ErrorFileContents c;
  const Json& message = doc.at("message");
  if (message.is_string()) {
    c.message = message.get<std::string>();
    if (doc.contains("timestamp")) c.timestampS = parseTimestamp(doc.at("timestamp"));
  } else if (message.is_object()) {
    // torch: message.extraInfo.py_callstack, else message.message, else "<N/A>".
    const Json* extra = message.contains("extraInfo") && message.at("extraInfo").is_object()
                            ? &message.at("extraInfo")
                            : nullptr;
    if (extra && extra->contains("py_callstack") && extra->at("py_callstack").is_string()) {
      c.message = extra->at("py_callstack").get<std::string>();
    } else if (message.contains("message") && message.at("message").is_string()) {
      c.message = message.at("message").get<std::string>();
    } else {
      c.message = "<N/A>";
    }
    if (extra && extra->contains("timestamp"))
      c.timestampS = parseTimestamp(extra->at("timestamp"));
  } else {
    return malformed(path, "\"message\" is neither a string nor an object");
  }
  c.valid = true;
  c.document = std::move(doc);
  return c;
}

nlohmann::ordered_json makeErrorRecord(const std::string& message, const std::string& callstack,
                                       std::int64_t timestampS) {
  Json extra = Json::object();
  extra["py_callstack"] = callstack;
  extra["timestamp"] = std::to_string(timestampS);
  Json inner = Json::object();
  inner["message"] = message;
  inner["extraInfo"] = std::move(extra);
  Json doc = Json::object();
  doc["message"] = std::move(inner);
  return doc;
}

nlohmann::ordered_json withErrorCode(nlohmann::ordered_json doc, int exitCode) {
  // torch: `if error_code:` then only a dict message gets the override.
  if (exitCode != 0 && doc.is_object() && doc.contains("message") && doc["message"].is_object()) {
    doc["message"]["errorCode"] = exitCode;
  }
  return doc;
}

std::string dumpPythonStyle(const nlohmann::ordered_json& doc) {
  std::string out;
  dumpInto(doc, out);
  return out;
}

void writeErrorFile(const std::string& path, const nlohmann::ordered_json& doc) {
  // torch removes the old file first (it may have been written by a child that inherited the
  // same TORCHELASTIC_ERROR_FILE before its own was set) and then writes a fresh one.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw Error("cannot remove old error file " + path + ": " + std::strerror(errno));
  }
  writeWholeFile(path, dumpPythonStyle(doc), 0666, "error file");
}

}  // namespace dtrun::agent
