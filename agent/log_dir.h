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
// Nothing is created before it is needed: the constructor only checks (and, for a --log-dir the
// user gave, creates) the base; the torchelastic_ temp dir, the run dir and the attempt's rank
// dirs are made by the first prepareAttempt(), just before workers start, so an agent that never
// starts workers leaves nothing behind. At exit removeIfEmpty() takes back what this agent made
// with one rmdir per directory (no tree walk). With hundreds of agents on one host this is most
// of what they cost the filesystem (docs/benchmarks.md, many nodes).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

class LogDir {
 public:
  /// A --log-dir the user gave is created now (missing parents too) and checked. `base` empty
  /// or unset = a new torchelastic_ dir under $TMPDIR, made by the first prepareAttempt() (the
  /// temporary directory is checked now). Blocking; throws ConfigError naming the path when the
  /// base is not a directory or cannot be made.
  LogDir(const std::optional<std::string>& base, const std::string& runId);

  /// Makes the base and run dirs on the first call; then removes <run>/attempt_<attempt> with
  /// everything in it when it exists and makes it anew with one empty dir per local rank in
  /// [0, nproc). No-op when disabled. Blocking; throws dtrun::Error.
  void prepareAttempt(int attempt, int nproc);

  /// Takes back the directories this agent made, deepest first, as long as they are empty:
  /// rank and attempt dirs, the run dir, and without --log-dir the torchelastic_ temp dir
  /// (torchrun leaves one per run behind; dtrun keeps only those with logs or error files).
  /// Never touches the base the user gave. Returns true when the temp dir is gone. Blocking;
  /// never throws.
  bool removeIfEmpty();

  /// True for --log-dir /dev/null: no files, console only.
  bool disabled() const { return disabled_; }
  /// True once the run dir exists (after the first prepareAttempt(), unless disabled).
  bool created() const { return !runDir_.empty(); }
  /// The base directory (absolute; "/dev/null" when disabled; "" while a temp base is not made).
  const std::string& baseDir() const { return baseDir_; }
  /// <base>/<run_id>_XXXXXXXX, absolute ("" when disabled or not made yet).
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
  void makeRunDir();

  std::string runId_;
  std::string tmpRoot_;  // where the torchelastic_ dir goes when no base was given
  std::string baseDir_;
  std::string runDir_;
  bool disabled_ = false;
  bool ownsBase_ = false;          // the base is a torchelastic_ temp dir made here
  std::vector<std::string> made_;  // attempt and rank dirs made here, in the order made
};

/// Python's tempfile.mkdtemp(prefix=prefix, dir=dir): makes dir/<prefix><8 of [a-z0-9_]> with
/// mode 0700, retrying on a name clash; returns its path. Blocking; throws dtrun::Error.
std::string makeTempDir(const std::string& dir, const std::string& prefix);

}  // namespace dtrun::agent
