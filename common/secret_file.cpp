#include "common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace dtrun {

std::string readSecretFile(const std::string& path, const std::string& what) {
  auto fail = [&](const std::string& why) { return ConfigError(what + " " + path + ": " + why); };
  if (path.empty()) throw ConfigError(what + ": the path is empty");
  // O_NONBLOCK: a FIFO planted at the path must not hang the launcher in open().
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  struct stat st {};
  std::string text;
  try {
    if (::fstat(fd, &st) != 0) throw fail(std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw fail("not a regular file");
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw fail(std::string("readable or writable by group or others (mode ") + mode +
                 "): run chmod 600 " + path);
    }
    if (static_cast<std::size_t>(st.st_size) > kMaxSecretBytes) {
      throw fail("longer than " + std::to_string(kMaxSecretBytes) + " bytes: not a token file?");
    }
    char buf[kMaxSecretBytes + 1];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw fail(std::strerror(errno));
      if (n == 0) break;
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > kMaxSecretBytes) {
        throw fail("longer than " + std::to_string(kMaxSecretBytes) + " bytes: not a token file?");
      }
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.pop_back();
  }
  if (text.size() < kMinSecretBytes) {
    throw fail((text.empty() ? std::string("empty")
                             : "shorter than " + std::to_string(kMinSecretBytes) + " bytes") +
               ": make one with: (umask 077; head -c 32 /dev/urandom | base64 > " + path + ")");
  }
  return text;
}

}  // namespace dtrun
