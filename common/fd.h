// Descriptors: UniqueFd, the one owner of a file descriptor; makePipe; and writeAll, the one way
// dtrun writes bytes to a descriptor (worker output to the console and the log files, the ssh
// output of --hostfile).
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace dtrun {

/// Owns one file descriptor and closes it when destroyed. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (-1 = none).
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;

  /// The descriptor (-1 when empty); ownership stays here.
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  /// Closes the held descriptor (if any) and holds `fd` instead.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Both ends of a pipe.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

/// A new pipe, both ends close-on-exec (pipe2 with O_CLOEXEC | `flags`). Throws dtrun::Error
/// "<what>: pipe: <reason>".
Pipe makePipe(const std::string& what, int flags = 0);

/// Writes all of `data` to `fd`, in one write(2) unless the kernel takes less, and returns true;
/// false on an error that will not go away (EPIPE, EBADF, ENOSPC...), after which the caller
/// drops that destination. A full descriptor is waited for, never dropped: a non-blocking
/// console (O_NONBLOCK set by another process sharing the tty) is polled until it takes the
/// bytes, so output is lost only when its reader is gone. Blocks while `fd` is full, as a
/// blocking stdout would (torchrun's tee threads block likewise); any thread.
bool writeAll(int fd, std::string_view data);

}  // namespace dtrun
