// FailureCollector: a failed worker's ProcessFailure (its error file, its exit, the last lines
// of its stderr), the job's failure records read back from the store, and the job-wide report:
// printed once, and the agent's own error file (TORCHELASTIC_ERROR_FILE) written as torch's
// @record does (agent/failure_report.h holds the format).
#pragma once

#include <spdlog/logger.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/failure_report.h"
#include "agent/launch_config.h"
#include "agent/log_dir.h"
#include "agent/worker_streams.h"
#include "common/exit_status.h"

namespace dtrun::agent {

/// What the collector needs of a failed worker besides its round and local rank.
struct FailedWorker {
  int localRank = 0;
  int pid = 0;
  ExitStatus status;
  std::string execError;  ///< why the program could not be started ("" = it was)
};

class FailureCollector {
 public:
  /// `config`, `logDir` and `streams` must outlive this.
  FailureCollector(const LaunchConfig& config, const LogDir& logDir, WorkerStreams& streams,
                   std::string hostname, std::shared_ptr<spdlog::logger> log);

  /// The failure of `worker` in `round`: logs it, takes its stderr's last lines (the forwarded
  /// pipe is drained and closed) and builds the ProcessFailure, handed to `done` on the io
  /// thread (or at once for a redirected stderr).
  void collect(const rendezvous::RoundInfo& round, const FailedWorker& worker,
               std::function<void(ProcessFailure)> done);
  /// The job's failure records (ProcessFailure JSON each); an unreadable one is logged and
  /// skipped.
  std::vector<ProcessFailure> parse(const std::vector<std::string>& records) const;
  /// Prints the job-wide report on `fd` and writes the agent's error file when
  /// TORCHELASTIC_ERROR_FILE names one (a failure to write it is logged). `failures` must not be
  /// empty.
  void report(const std::vector<ProcessFailure>& failures, int fd = 2) const;

 private:
  const LaunchConfig& config_;
  const LogDir& logDir_;
  WorkerStreams& streams_;
  std::string hostname_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace dtrun::agent
