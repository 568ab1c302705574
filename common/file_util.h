// writeWholeFile: one small file written in full, with errors that name it; makePrivateTempDir:
// a fresh 0700 directory under $TMPDIR. Header-only, so the agent and worker_runtime (which
// takes only the store client's objects) share them.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "common/error.h"

namespace dtrun {

/// Creates or truncates `path` (mode `mode` when created) and writes all of `text`; throws
/// dtrun::Error "cannot write <what> <path>: <reason>". Blocking; any thread.
inline void writeWholeFile(const std::string& path, std::string_view text, mode_t mode,
                           const std::string& what) {
  auto fail = [&](int err) {
    return Error("cannot write " + what + " " + path + ": " + std::strerror(err));
  };
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw fail(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw fail(err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw fail(errno);
}

/// A fresh directory $TMPDIR/<prefix>-XXXXXX (/tmp without TMPDIR), mode 0700 (mkdtemp); returns
/// its path. Throws dtrun::Error "<what>: cannot create a directory <path>: <reason>". Blocking.
inline std::string makePrivateTempDir(const std::string& prefix, const std::string& what) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  if (!::mkdtemp(dir.data())) {
    throw Error(what + ": cannot create a directory " + dir + ": " + std::strerror(errno));
  }
  return dir;
}

}  // namespace dtrun
