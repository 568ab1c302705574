// spawnProcess: the one way dtrun starts a program (workers, ssh to other hosts, scontrol).
//
// clone(CLONE_VM | CLONE_VFORK) (fork in sanitizer builds; docs/design.md, "Starting
// processes"), then in the child only system calls: its own process group when asked (tini's
// rule: a stop reaches the worker's whole tree), a parent-death signal with the check that closes
// the race against a parent that died first, default signal dispositions and an empty mask (the
// agent ignores SIGPIPE and Asio blocks and handles signals; both would survive exec), the three
// standard streams, then every other descriptor closed except those the caller keeps, and exec.
// An exec failure travels back through a close-on-exec pipe, so the caller knows before
// spawnProcess returns whether the program runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace dtrun {

/// A descriptor value for SpawnSpec's streams: the child reads or writes /dev/null.
inline constexpr int kSpawnDevNull = -2;

struct SpawnSpec {
  std::vector<std::string> argv;  ///< argv[0] without a '/' is looked up in this process's PATH
  /// The child's whole environment ("KEY=value"); unset: this process's environment.
  std::optional<std::vector<std::string>> env;
  std::string cwd;               ///< working directory ("" = this process's)
  int stdinFd = -1;              ///< -1: this process's stdin; kSpawnDevNull; or a descriptor
  int stdoutFd = -1;             ///< -1: this process's stdout; kSpawnDevNull; or a descriptor
  int stderrFd = -1;             ///< -1: this process's stderr; kSpawnDevNull; or a descriptor
  bool ownProcessGroup = false;  ///< setpgid(0, 0): the child leads a process group of its own
  int parentDeathSignal = 0;     ///< PR_SET_PDEATHSIG (0 = none)
  /// Descriptors besides 0, 1 and 2 the child keeps (those the user passed to dtrun); every
  /// other descriptor is closed in the child, close-on-exec or not.
  std::vector<int> keepFds;
};

/// The program could not be started: not found (127 by the shell's convention) or found but not
/// executable (126). what() names the program and the reason.
class SpawnError : public Error {
 public:
  SpawnError(const std::string& what, int err) : Error(what), errno_(err) {}
  int error() const { return errno_; }
  /// 127 when the program does not exist, else 126 (tini's and the shell's convention).
  int exitCode() const { return errno_ == ENOENT || errno_ == ENOTDIR ? 127 : 126; }

 private:
  int errno_;
};

/// Starts `spec` and returns the child's pid once the program is running (exec succeeded).
/// Throws SpawnError when it could not be executed, Error when clone, fork or pipe failed. The
/// caller reaps the child. Blocks the calling thread until the child has exec'd; any thread.
int spawnProcess(const SpawnSpec& spec);

/// The descriptors this process has open besides 0, 1 and 2 that are not close-on-exec: what a
/// user handed dtrun (for SpawnSpec::keepFds). Call first thing in main(), before dtrun opens
/// anything of its own.
std::vector<int> inheritedDescriptors();

}  // namespace dtrun
