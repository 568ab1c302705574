#include "agent/failure_collector.h"

#include "common/fd.h"

namespace dtrun::agent {

FailureCollector::FailureCollector(const LaunchConfig& config, const LogDir& logDir,
                                   WorkerStreams& streams, std::string hostname,
                                   std::shared_ptr<spdlog::logger> log)
    : config_(config),
      logDir_(logDir),
      streams_(streams),
      hostname_(std::move(hostname)),
      log_(std::move(log)) {}

void FailureCollector::collect(const rendezvous::RoundInfo& round, const FailedWorker& worker,
                               std::function<void(ProcessFailure)> done) {
  log_->error("agent: failed ({}) local_rank: {} (pid: {}) of {}", worker.status.describe(),
              worker.localRank, worker.pid, config_.entrypointName);
  FailedExit exit;
  exit.localRank = worker.localRank;
  exit.rank = round.rankOffset + worker.localRank;
  exit.pid = worker.pid;
  exit.exitCode = worker.status.torchExitCode();
  exit.host = hostname_;
  exit.errorFile = logDir_.errorFilePath(static_cast<int>(round.round), worker.localRank);
  exit.observedAt = std::chrono::system_clock::now();
  streams_.takeErr(round, worker.localRank,
                   [exit, execError = worker.execError,
                    done = std::move(done)](std::vector<std::string> tail) mutable {
                     exit.stderrTail = std::move(tail);
                     if (!execError.empty()) exit.stderrTail.push_back(execError);
                     done(buildProcessFailure(exit));
                   });
}

std::vector<ProcessFailure> FailureCollector::parse(const std::vector<std::string>& records) const {
  std::vector<ProcessFailure> failures;
  for (const auto& f : records) {
    try {
      failures.push_back(nlohmann::json::parse(f).get<ProcessFailure>());
    } catch (const std::exception& e) {
      log_->warn("unreadable failure record: {}", e.what());
    }
  }
  return failures;
}

void FailureCollector::report(const std::vector<ProcessFailure>& failures, int fd) const {
  writeAll(fd, formatFailureReport(config_.entrypointName, failures) + "\n");
  if (auto it = config_.baseEnv.find("TORCHELASTIC_ERROR_FILE");
      it != config_.baseEnv.end() && !it->second.empty()) {
    try {
      writeAgentErrorFile(it->second, failures[rootCauseIndex(failures)]);
    } catch (const std::exception& e) {
      log_->warn("could not write the agent's error file: {}", e.what());
    }
  }
}

}  // namespace dtrun::agent
