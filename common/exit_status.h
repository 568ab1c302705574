// ExitStatus: how a process ended, with torch's and the shell's ways of saying it. Plain data; the
// one decoding of a waitpid() status for workers, the ssh processes of --hostfile and the
// commands the launcher runs.
#pragma once

#include <optional>
#include <string>

namespace dtrun {

/// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  int code = 0;               ///< exit code when `signal` is empty
  std::optional<int> signal;  ///< the terminating signal

  bool success() const { return !signal && code == 0; }
  /// torch's convention: the exit code, or minus the signal number.
  int torchExitCode() const { return signal ? -*signal : code; }
  /// The shell's convention: the exit code, or 128 + the signal number.
  int shellExitCode() const { return signal ? 128 + *signal : code; }
  /// "exit code 3" or "signal 9 (SIGKILL)".
  std::string describe() const;
  /// Decodes a waitpid() status.
  static ExitStatus fromWaitStatus(int status);
};

}  // namespace dtrun
