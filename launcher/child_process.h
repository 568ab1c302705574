// A child with its three standard streams on pipes, for the launcher's own helpers (ssh to the
// hosts of --hostfile): started in a process group of its own, so that a terminal's Ctrl-C
// reaches only dtrun, which then stops its children in order.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dtrun::launcher {

/// An owned file descriptor (-1 = none), closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  /// Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  /// Closes it now (a no-op when there is none).
  void reset();

 private:
  int fd_ = -1;
};

/// A started child: its pid (the caller reaps it) and this side of its three pipes.
struct ChildPipes {
  int pid = 0;
  UniqueFd stdinWrite;
  UniqueFd stdoutRead;
  UniqueFd stderrRead;
};

/// Starts `argv` (argv[0] looked up in PATH) with this process's environment, in a process group
/// of its own, its standard input, output and error on new pipes (close-on-exec on this side).
/// Throws dtrun::Error when it cannot be started. Blocks for the fork and exec; any thread.
ChildPipes startWithPipes(const std::vector<std::string>& argv);

}  // namespace dtrun::launcher
