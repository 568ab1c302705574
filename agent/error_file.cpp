#include "agent/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/file_util.h"

namespace dtrun::agent {

namespace {

// A traceback is a few KiB; anything this large is not an error file a worker meant to write.
constexpr std::size_t kMaxErrorFileBytes = 16 * 1024 * 1024;

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

}  // namespace

std::optional<ErrorFileContents> readErrorFile(const std::string& path) {
  struct stat st {};
  // os.path.isfile: follows symlinks; anything but a regular file counts as "no error file".
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;

  std::string text;
  std::string why;
  if (!slurp(path, text, why)) return malformed(path, why);

  TorchErrorFile file;
  try {
    file = decodeTorchErrorFile(text);
  } catch (const ConfigError& e) {
    return malformed(path, e.what());
  }
  ErrorFileContents c;
  // torch's failure report: message.extraInfo.py_callstack, else message.message, else "<N/A>";
  // the string format's message as it is.
  c.message = file.callstack.value_or(file.message.value_or("<N/A>"));
  c.timestampS = file.timestamp;
  c.valid = true;
  c.document = std::move(file.document);
  return c;
}

nlohmann::ordered_json withErrorCode(nlohmann::ordered_json doc, int exitCode) {
  // torch: `if error_code:` then only a dict message gets the override.
  if (exitCode != 0 && doc.is_object() && doc.contains("message") && doc["message"].is_object()) {
    doc["message"]["errorCode"] = exitCode;
  }
  return doc;
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
