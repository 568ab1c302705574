// How a dtrun run ended, and the exit code that says so (docs/observe.md, "Exit codes").
//
// The policy decides the outcome (agent/policy.h); this file maps it to the process's exit code
// under the scheme the user chose, in one function that every part of dtrun uses:
//
//   --exit-codes torchrun (default): 0 success, 1 any failure, 2 a bad command line.
//   --exit-codes detailed:            0 success, 1 workers failed, 2 usage, 3 hang, 4 the
//                                     rendezvous never formed, 5 the job was lost, 6 the job
//                                     failed on another node, 128+n stopped by signal n.
//   --exit-code worker (DeepSpeed's launcher, the deepspeed front-end): a failed job exits with
//                                     its root cause's own code, 256-N for signal N.
//
// Pure: no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::agent {

/// What happened to the job, as this node saw it.
enum class Outcome {
  kSucceeded,                ///< every worker of this node and the job succeeded
  kFinishedWithoutThisNode,  ///< the job succeeded in rounds this node was not part of
  kWorkersFailed,            ///< workers failed and the restarts ran out
  kHung,                     ///< ... and the final failure was a hang (file timer, stall)
  kFailedElsewhere,          ///< the job failed for good, but not on this node
  kRendezvousFailed,         ///< the rendezvous never formed (join timeout, job over, no store)
  kJobLost,                  ///< the store or the etcd quorum could not be reached any more
  kSignaled,                 ///< dtrun itself was stopped by a signal
  kUsageError,               ///< a bad command line; nothing started
  kConfigError,              ///< a bad setting found while starting (a file, a port)
  kError,                    ///< anything else that ended dtrun early
};

/// The outcome with what it needs: the signal, and one line saying why (for the summary and the
/// termination message).
struct JobOutcome {
  Outcome kind = Outcome::kError;
  int signal = 0;   ///< kSignaled: the signal's number
  std::string why;  ///< "" for success
  /// A job whose workers failed: the root cause's torch-style exit code (minus the signal
  /// number for a death by signal), for the worker scheme.
  std::optional<int> rootExitCode = std::nullopt;
};

/// The exit-code schemes.
enum class ExitCodeScheme {
  kTorchrun,  ///< 0 success, 1 any failure, 2 usage (torchrun's; the default)
  kDetailed,  ///< a distinct code per outcome (--exit-codes detailed)
  kWorker,    ///< a failed job: the root cause's own code, 256-N for signal N (DeepSpeed's)
};

/// The exit code of `outcome` under `scheme` (the table above). The only place that decides it.
int exitCodeFor(const JobOutcome& outcome, ExitCodeScheme scheme);

/// "succeeded", "workers_failed", ...: the outcome's name in summaries, the event log, metrics.
std::string_view outcomeName(Outcome kind);

/// "torchrun" / "detailed" (also DTRUN_EXIT_CODES); nullopt for anything else.
std::optional<ExitCodeScheme> parseExitCodeScheme(std::string_view text);

/// Kubernetes' termination message: at most this many bytes are read from the file.
inline constexpr std::size_t kTerminationMessageLimit = 4096;

/// The termination message for `outcome`: "dtrun: <name>: <why>", then `details` (the summary
/// facts) on a line of its own, within `limit` bytes: the why is shortened (ending in "...")
/// so that the details fit; all is cut at a UTF-8 character boundary.
std::string terminationMessage(const JobOutcome& outcome, const std::string& details = "",
                               std::size_t limit = kTerminationMessageLimit);

}  // namespace dtrun::agent
