// LogDir: torchrun's log directory layout (torch/distributed/elastic/agent/server/
// local_elastic_agent.py, _make_log_dir; docs/logs-and-reports.md).
//
//   <base>/                       --log-dir, or a fresh <tmp>/torchelastic_XXXXXXXX
//     <run_id>_XXXXXXXX/          made once per agent (Python's mkdtemp naming: 8 of [a-z0-9_])
//       attempt_<n>/              removed and recreated before every (re)start of the workers
//         <local_rank>/           stdout.log, stderr.log (when redirected), error.json (worker)
//         filtered_stdout.log     lines matching --duplicate-stdout-filters (newest torch)
//         filtered_stderr.log     lines matching --duplicate-stderr-filters
//
// --log-dir /dev/null (newest torch) makes no directory at all: every path accessor returns ""
// (meaning: console only, and TORCHELASTIC_ERROR_FILE="" for the workers).
// A value type holding paths; the filesystem work happens in the constructor and prepareAttempt().
#pragma once

#include <optional>
#include <string>

namespace dtrun::agent {

class LogDir {
 public:
  /// Creates the base (missing parents too) and the run dir. `base` empty or unset = a new
  /// torchelastic_ dir under $TMPDIR (not removed later, as torchrun). Blocking; throws
  /// ConfigError naming the path when the base is not a directory or cannot be made.
  LogDir(const std::optional<std::string>& base, const std::string& runId);

  /// Removes <run>/attempt_<attempt> with everything in it and recreates it with one empty dir
  /// per local rank in [0, nproc). No-op when disabled. Blocking; throws dtrun::Error.
  void prepareAttempt(int attempt, int nproc) const;

  /// Without --log-dir: removes the torchelastic_ temp dir this agent made when no file was
  /// written under it (torchrun leaves one per run behind; dtrun keeps only those with logs or
  /// error files). Returns true when it removed it. Blocking; never throws.
  bool removeIfEmpty() const;

  /// True for --log-dir /dev/null: no files, console only.
  bool disabled() const { return runDir_.empty(); }
  /// The base directory (absolute; "/dev/null" when disabled).
  const std::string& baseDir() const { return baseDir_; }
  /// <base>/<run_id>_XXXXXXXX, absolute ("" when disabled).
  const std::string& runDir() const { return runDir_; }
  /// <run>/attempt_<n> ("" when disabled).
  std::string attemptDir(int attempt) const;
  /// <run>/attempt_<n>/<local_rank> ("" when disabled).
  std::string rankDir(int attempt, int localRank) const;
  /// .../<local_rank>/stdout.log ("" when disabled).
  std::string stdoutPath(int attempt, int localRank) const;
  /// .../<local_rank>/stderr.log ("" when disabled).
  std::string stderrPath(int attempt, int localRank) const;
  /// .../<local_rank>/error.json: the worker's TORCHELASTIC_ERROR_FILE ("" when disabled).
  std::string errorFilePath(int attempt, int localRank) const;
  /// <run>/attempt_<n>/filtered_stdout.log ("" when disabled).
  std::string filteredStdoutPath(int attempt) const;
  /// <run>/attempt_<n>/filtered_stderr.log ("" when disabled).
  std::string filteredStderrPath(int attempt) const;

 private:
  std::string rankFile(int attempt, int localRank, const char* name) const;

  std::string baseDir_;
  std::string runDir_;
  bool ownsBase_ = false;  // the base is a torchelastic_ temp dir made here
};

/// Python's tempfile.mkdtemp(prefix=prefix, dir=dir): makes dir/<prefix><8 of [a-z0-9_]> with
/// mode 0700, retrying on a name clash; returns its path. Blocking; throws dtrun::Error.
std::string makeTempDir(const std::string& dir, const std::string& prefix);

}  // namespace dtrun::agent
