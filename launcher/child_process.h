// The launcher's own short-lived children whose output is wanted (scontrol under Slurm, the
// workers' interpreter asked which torch it would import), started through common/spawn.h's
// spawnProcess (the one way dtrun starts a program). --hostfile's ssh processes are supervised
// like workers instead (launcher/multi_host.h).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::launcher {

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
