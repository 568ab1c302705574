// Failure reports: torch's ProcessFailure and the ChildFailedError block printed when workers
// fail (torch/distributed/elastic/multiprocessing/errors/__init__.py), byte for byte, plus
// dtrun's one addition: a failure without an error file shows the last lines of the worker's
// stderr instead of the bare "To enable traceback" URL.
//
//   ============================================================
//   train.py FAILED
//   ------------------------------------------------------------
//   Failures:
//     <NO_OTHER_FAILURES>
//   ------------------------------------------------------------
//   Root Cause (first observed failure):
//   [0]:
//     time      : 2026-11-30_04:14:07
//     host      : node3
//     rank      : 1 (local_rank: 1)
//     exitcode  : 1 (pid: 9924)
//     error_file: <N/A>
//     traceback : Traceback (most recent call last):
//       File "train.py", line 5, in <module>
//     ValueError: boom on rank 1
//   ============================================================
//
// ProcessFailure is plain data with to_json/from_json, so agents can publish their failures to
// the store and any node can print the job-wide report.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

/// Why dtrun ended a worker that was still running: a hang, not a crash.
struct Hang {
  /// "timer": a file-timer deadline passed; "stall": no output from the group for too long.
  std::string kind;
  std::string scopeId;          ///< the timer's scope_id ("" for a stall)
  int pid = 0;                  ///< the process whose deadline passed (the worker or a child)
  std::int64_t deadlineMs = 0;  ///< epoch ms of the deadline (a stall: of the last sign of life)
  std::int64_t overstayMs = 0;  ///< how far past it dtrun acted (a stall: how long it was silent)
  int signal = 0;               ///< what dtrun sent the worker's process group
  std::string stacks;           ///< Python stacks asked for before the kill ("" = none)

  bool operator==(const Hang&) const = default;
};

/// One failed worker, as the report shows it.
struct ProcessFailure {
  int localRank = 0;
  int rank = 0;  ///< global rank
  int pid = 0;
  int exitCode = 0;  ///< torch style: the exit code, or minus the signal number
  std::string host;  ///< the agent's host name
  /// The worker's error file when it existed at the exit; "" = none (shown as "<N/A>").
  std::string errorFile;
  /// Epoch milliseconds: the error file's timestamp (seconds * 1000) when it has one, else
  /// when the agent observed the exit. The smallest is the root cause.
  std::int64_t timestampMs = 0;
  /// The traceback text, not indented: from the error file (py_callstack, message.message or
  /// the string message), a note naming a malformed error file, or torch's default ("Signal 9
  /// (SIGKILL) received by PID 12" / "To enable traceback see: <url>").
  std::string message;
  /// True when `message` came from a valid error file.
  bool fromErrorFile = false;
  /// The last lines of the worker's stderr, oldest first, without line terminators.
  std::vector<std::string> stderrTail;
  /// Set when dtrun killed the worker as hung; the report then leads with describeHang().
  std::optional<Hang> hang;

  bool operator==(const ProcessFailure&) const = default;
};

void to_json(nlohmann::json& j, const Hang& h);
void from_json(const nlohmann::json& j, Hang& h);

/// One line: 'hung: timer "step" of pid 42 passed its deadline (2026-11-30_04:14:07.250) by
/// 0.004 s; dtrun sent SIGKILL ...', or 'hung: no output and no timer activity from the worker
/// group for 600.000 s (since ...); ...'. Pure
/// apart from reading TZ.
std::string describeHang(const Hang& h);

/// One line for a failure: 'rank 3 (local_rank 1, pid 4242) on node-b: exit code 7: ValueError:
/// boom', with the hang first when dtrun killed it as hung, and the first line of its traceback
/// (or of its stderr tail) last. Pure apart from reading TZ (describeHang).
std::string describeFailure(const ProcessFailure& f);

/// Field names are the struct's (camelCase). from_json throws nlohmann::json::exception on a
/// missing or mistyped required field (localRank, rank, pid, exitCode, timestampMs).
void to_json(nlohmann::json& j, const ProcessFailure& f);
void from_json(const nlohmann::json& j, ProcessFailure& f);

/// What the agent knows about one failed exit; input of buildProcessFailure().
struct FailedExit {
  int localRank = 0;
  int rank = 0;
  int pid = 0;
  int exitCode = 0;  ///< torch style: minus the signal number for a death by signal
  std::string host;
  std::string errorFile;  ///< the TORCHELASTIC_ERROR_FILE the worker was given ("" = none)
  std::chrono::system_clock::time_point observedAt;
  std::vector<std::string> stderrTail;
};

/// torch's ProcessFailure.__post_init__: reads the error file if it exists (its timestamp and
/// traceback win), else torch's default message and the observed time. Strings are made valid
/// UTF-8. Never throws for a bad error file. Blocking (one small local file); any thread.
ProcessFailure buildProcessFailure(const FailedExit& exit);

/// Index of the root cause: the smallest timestampMs, ties to the first. `failures` must not be
/// empty. Pure.
std::size_t rootCauseIndex(const std::vector<ProcessFailure>& failures);

/// `epochSeconds` as local time "YYYY-MM-DD_HH:MM:SS" (Python's
/// datetime.fromtimestamp(ts).isoformat(sep="_")). Uses the process's TZ.
std::string formatLocalTime(std::int64_t epochSeconds);

/// The text shown after "traceback : " before indentation: `message`, or for a failure without
/// an error file that has stderr lines, those lines (after the signal line for a signal). A hang
/// leads with describeHang() and ends with the Python stacks. Pure apart from reading TZ.
std::string tracebackText(const ProcessFailure& f);

/// torch's ChildFailedError message for `failures` listed in the given order (pass them sorted
/// by global rank for torch's order): from the first "=" border to the last, no trailing
/// newline (torch prints it after "ChildFailedError: \n"). "" when `failures` is empty. Pure
/// apart from reading TZ.
std::string formatFailureReport(const std::string& entrypointName,
                                const std::vector<ProcessFailure>& failures);

/// The agent's own error file (torch's @record on ChildFailedError, errors/error_handler.py):
/// removes any file at `path` and writes the root failure's error-file JSON with
/// message.errorCode = exitCode. When that file is gone or invalid (or on another node), writes a
/// record-format document built from the failure instead (torch writes nothing then). Blocking;
/// throws dtrun::Error naming the path.
void writeAgentErrorFile(const std::string& path, const ProcessFailure& root);

}  // namespace dtrun::agent
