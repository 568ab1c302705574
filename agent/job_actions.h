// JobActions: the policy's actions on the job (join, the round's worker store, a failure
// report, success, a membership change, the job's state, its failures and its record, close)
// carried out on the JobLink, each answer turned into the policy's next event. Every answer
// comes later, on the io thread; none is dispatched after stop().
#pragma once

#include <spdlog/logger.h>

#include <functional>
#include <memory>

#include "agent/event_log.h"
#include "agent/failure_collector.h"
#include "agent/job_link.h"
#include "agent/policy.h"

namespace dtrun::agent {

class JobActions {
 public:
  using Dispatch = std::function<void(Event)>;

  /// `job`, `failures` and `events` must outlive this. `maxRestarts` goes with each failure
  /// report (the job link decides restart or final job-wide).
  JobActions(JobLink& job, const FailureCollector& failures, EventLog& events, int maxRestarts,
             std::shared_ptr<spdlog::logger> log, Dispatch dispatch);
  JobActions(const JobActions&) = delete;
  JobActions& operator=(const JobActions&) = delete;

  /// Carries out `a` when it is one of the job's actions and returns true; false for the
  /// others. `currentRound` is the round the policy is in (GetWorkerStore's).
  bool run(Action& a, const rendezvous::RoundInfo& currentRound);
  /// No answer is dispatched from now on (the agent finished).
  void stop() { stopped_ = true; }

 private:
  /// Runs `done` with the result unless stop() was called meanwhile.
  template <typename T>
  std::function<void(Result<T>)> guarded(std::function<void(Result<T>)> done);
  void join();

  JobLink& job_;
  const FailureCollector& failures_;
  EventLog& events_;
  int maxRestarts_;
  std::shared_ptr<spdlog::logger> log_;
  Dispatch dispatch_;
  bool stopped_ = false;
};

}  // namespace dtrun::agent
