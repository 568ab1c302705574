// RunHistory: what this agent's event-log records say so far, folded as they are written:
// rounds and their world sizes, restarts and their causes, rendezvous durations, workers started
// and how they ended, hangs. The metrics endpoint (agent/metrics.h) and the summary line at the
// end read it, so their counts are the event log's and cannot drift from it: every record goes
// through EventLog::record, which hands it here whether or not a file is written
// (docs/observe.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/outcome.h"

namespace dtrun::agent {

class RunHistory {
 public:
  using Time = std::chrono::system_clock::time_point;

  /// One round this node was in (a rendezvous_done record).
  struct Round {
    std::int64_t round = 0;
    int worldSize = 0;
    int groupWorldSize = 0;
    int groupRank = 0;
    Time at;
  };
  /// One restart this node went through (a restart_decided record naming the next round).
  struct Restart {
    std::int64_t round = 0;  ///< the round that ended
    std::int64_t nextRound = 0;
    std::string cause;  ///< worker_failure, worker_hung, node_left, node_joined
  };

  /// `started`: when the agent started (the summary's wall time runs from it).
  explicit RunHistory(Time started = std::chrono::system_clock::now()) : started_(started) {}

  /// Folds one event-log record in (EventLog's observer). Unknown events are ignored.
  void onRecord(std::string_view event, const nlohmann::json& fields, Time when);

  const std::vector<Round>& rounds() const { return rounds_; }
  const std::vector<Restart>& restarts() const { return restarts_; }
  /// Restarts by cause.
  const std::map<std::string, std::uint64_t>& restartsByCause() const { return restartCauses_; }
  /// Worker exits by outcome: succeeded, failed, hung, stopped.
  const std::map<std::string, std::uint64_t>& exitsByOutcome() const { return exits_; }
  /// Hangs by kind: timer (a file-timer deadline, signalled), stall (--stall-timeout).
  const std::map<std::string, std::uint64_t>& hangsByKind() const { return hangs_; }
  std::uint64_t workersStarted() const { return started_workers_; }
  /// Workers of the current round started and not yet exited.
  int workersRunning() const { return running_; }
  /// When the current round's workers were started; nullopt before the first start.
  std::optional<Time> lastWorkersStart() const { return lastStart_; }
  /// Rendezvous durations: their sum, how many, the last one.
  double rendezvousSecondsSum() const { return rdzvSum_; }
  std::uint64_t rendezvousCount() const { return rdzvCount_; }
  std::optional<double> lastRendezvousSeconds() const { return rdzvLast_; }
  Time started() const { return started_; }

  /// The line printed when the job ends: 'dtrun: job <id> <outcome> after 12.3 s: 3 rounds
  /// (world sizes 4, 4, 2); 2 restarts (worker_failure after round 0, node_left after round 1);
  /// <why>' (without it when `withWhy` is false). Pure.
  std::string summary(const std::string& runId, const JobOutcome& outcome, Time now,
                      bool withWhy = true) const;
  /// The same facts as one JSON object (the job_ended record).
  nlohmann::json summaryJson(const JobOutcome& outcome, int exitCode, Time now) const;

 private:
  Time started_;
  std::vector<Round> rounds_;
  std::vector<Restart> restarts_;
  std::map<std::string, std::uint64_t> restartCauses_;
  std::map<std::string, std::uint64_t> exits_;
  std::map<std::string, std::uint64_t> hangs_;
  std::uint64_t started_workers_ = 0;
  int running_ = 0;
  std::optional<Time> lastStart_;
  std::optional<Time> rdzvStart_;
  double rdzvSum_ = 0;
  std::uint64_t rdzvCount_ = 0;
  std::optional<double> rdzvLast_;
};

}  // namespace dtrun::agent
