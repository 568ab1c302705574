// The launcher's own short-lived children, started through common/spawn.h's spawnProcess (the one
// way dtrun starts a program): ssh to the hosts of --hostfile with its three streams on pipes,
// and commands whose output is wanted (scontrol under Slurm, the workers' interpreter asked
// which torch it would import).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/log_forwarder.h"

namespace dtrun::launcher {

using agent::UniqueFd;

/// A started child: its pid (the caller reaps it) and this side of its three pipes.
struct ChildPipes {
  int pid = 0;
  UniqueFd stdinWrite;
  UniqueFd stdoutRead;
  UniqueFd stderrRead;
};

/// Starts `argv` (argv[0] looked up in PATH) with this process's environment, in a process group
/// of its own (so that a terminal's Ctrl-C reaches only dtrun, which stops it in order), its
/// standard input, output and error on new pipes (close-on-exec on this side). Throws
/// dtrun::SpawnError when the program cannot be executed, dtrun::Error when a pipe or fork
/// fails. Blocks for the fork and exec; any thread.
ChildPipes startWithPipes(const std::vector<std::string>& argv);

/// What a command printed (stdout and stderr together) and how it ended.
struct CommandResult {
  bool finished = false;  ///< false: it could not start, or ran past the timeout and was killed
  int exitCode = -1;      ///< exit code, or 128+signal; -1 when !finished
  std::string output;     ///< stdout and stderr, at most 64 KiB
  std::string error;      ///< why it did not finish ("" when it did)
};

/// Runs argv[0] (looked up in PATH) with `env` ("KEY=value" entries; unset: this process's
/// environment) and stdin from /dev/null, and returns its output. Blocks until it exits or
/// `timeout` passes; then it is SIGKILLed and reaped. Reaps only its own child; any thread.
CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         const std::optional<std::vector<std::string>>& env = std::nullopt);

}  // namespace dtrun::launcher
