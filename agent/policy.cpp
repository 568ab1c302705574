#include "agent/policy.h"

#include <signal.h>

#include <algorithm>

#include "common/signals.h"

namespace dtrun::agent {

Policy::Policy(PolicySettings settings, std::shared_ptr<spdlog::logger> log)
    : settings_(std::move(settings)), log_(std::move(log)) {}

const char* Policy::name(State s) {
  switch (s) {
    case State::kJoining:
      return "joining";
    case State::kRunning:
      return "running";
    case State::kStopping:
      return "stopping";
    case State::kDoneWaiting:
      return "done_waiting";
    case State::kIdle:
      return "idle";
    case State::kFinishing:
      return "finishing";
    case State::kFinished:
      return "finished";
  }
  return "?";
}

std::vector<Action> Policy::handle(const Event& e) {
  out_.clear();
  std::visit([this](const auto& ev) { on(ev); }, e);
  return std::move(out_);
}

void Policy::transition(State next) {
  if (next == state_) return;
  log_->debug("agent: {} -> {}", name(state_), name(next));
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) advanceAsked_ = false;
  state_ = next;
}

void Policy::on(const event::Start&) { join(); }

void Policy::join() {
  transition(State::kJoining);
  log_->info("agent: [{}] rendezvous'ing worker group", settings_.role);
  emit(action::Join{});
}

void Policy::on(const event::Joined& e) {
  // Shutting down (a signal, a lost job) while the join ran: no workers start any more.
  if (state_ != State::kJoining || shuttingDown_) return;
  round_ = e.round;
  haveRound_ = true;
  localFailures_.clear();
  hung_.clear();
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : round_.nodes) nodes.push_back(n);
  emit(action::Record{"rendezvous_done",
                      {{"round", round_.round},
                       {"group_rank", round_.groupRank},
                       {"group_world_size", round_.groupWorldSize},
                       {"rank_offset", round_.rankOffset},
                       {"world_size", round_.worldSize},
                       {"nodes", nodes}}});
  emit(action::GetWorkerStore{});
}

void Policy::on(const event::JoinFailed& e) {
  if (state_ != State::kJoining || shuttingDown_) return;
  if (e.over && e.over->succeeded && !e.over->final) {
    // Late: the job succeeded without this node (it was stopped, cut off, or started late).
    withoutNode_ = *e.over->succeeded;
    finishWithoutNode();
    return;
  }
  log_->error("rendezvous failed: {}", e.why);
  if (e.over && !e.failures.empty()) emit(action::PrintReport{e.failures});
  emit(action::Record{"shutdown",
                      {{"reason", e.over ? "failed" : "rendezvous_failed"}, {"error", e.why}}});
  // A job already over is a rendezvous that never formed for this node, as is a timeout.
  finish(JobOutcome{e.lost ? Outcome::kJobLost : Outcome::kRendezvousFailed, 0, e.why});
}

void Policy::on(const event::WorkerStoreReady& e) {
  if (state_ != State::kJoining || shuttingDown_) return;
  transition(State::kRunning);
  running_ = settings_.nprocPerNode;
  succeeded_ = 0;
  log_->info("agent: [{}] starting worker group: round {}, ranks {}..{} of {}, master {}:{}",
             settings_.role, round_.round, round_.rankOffset,
             round_.rankOffset + settings_.nprocPerNode - 1, round_.worldSize, e.store.addr,
             e.store.port);
  emit(action::StartWorkers{round_, e.store});
  // Something may have happened while this node was starting (a failure elsewhere, a node
  // leaving): look once now.
  queryState();
}

void Policy::on(const event::WorkerStoreFailed& e) {
  if (state_ != State::kJoining) return;
  log_->error("could not agree on MASTER_ADDR:MASTER_PORT: {}", e.why);
  finish(JobOutcome{Outcome::kRendezvousFailed, 0,
                    "could not agree on MASTER_ADDR:MASTER_PORT: " + e.why});
}

void Policy::on(const event::WorkerExited& e) {
  if (running_ > 0) --running_;
  if (e.status.success()) ++succeeded_;   // counted whatever the state: see JobLost
  if (state_ != State::kRunning) return;  // expected: they are being stopped
  if (e.status.success()) {
    if (running_ > 0) return;
    emit(action::Sweep{});
    log_->info("agent: [{}] local worker group finished (SUCCEEDED); waiting for the other nodes",
               settings_.role);
    transition(State::kDoneWaiting);
    doneReportPending_ = true;
    emit(action::MarkDone{round_.round, round_.groupWorldSize});
    return;
  }
  // A failure: the whole group stops (all or nothing); the failure is collected (its stderr
  // tail read) and reported job-wide, which ends the round everywhere.
  transition(State::kStopping);
  emit(action::CollectFailure{e.localRank, e.status});
  const int rank = round_.rankOffset + e.localRank;
  stop(SIGTERM,
       "rank " + std::to_string(rank) + " on " + settings_.hostname + " failed with " +
           e.status.describe(),
       AfterStop::kIdle);
}

void Policy::on(const event::FailureCollected& e) {
  if (state_ == State::kFinished) return;
  ProcessFailure failure = e.failure;
  if (auto it = hung_.find(failure.localRank); it != hung_.end()) failure.hang = it->second;
  localFailures_.push_back(failure);
  emit(action::ReportFailure{round_.round, std::move(failure)});
}

void Policy::stop(int signo, std::optional<std::string> abortReason, AfterStop after) {
  afterStop_ = std::max(afterStop_, after);
  emit(action::StopWorkers{signo, std::move(abortReason)});
}

void Policy::on(const event::WorkersStopped&) {
  const AfterStop after = std::exchange(afterStop_, AfterStop::kNone);
  if (state_ == State::kFinished) return;
  switch (after) {
    case AfterStop::kNone:
      return;  // a second completion of stops that overlapped
    case AfterStop::kIdle:
      transition(State::kIdle);
      queryState();
      return;
    case AfterStop::kRejoin:
      join();
      return;
    case AfterStop::kReport:
      emit(action::ReadFailures{reportRound_});
      return;
    case AfterStop::kFinish:
      if (withoutNode_) {
        finishWithoutNode();
        return;
      }
      if (lostJob_) {
        lostStopped_ = true;
        finishLost();
        return;
      }
      finish(stopOutcome_);
      return;
  }
}

void Policy::on(const event::JobChanged&) { queryState(); }

void Policy::queryState() {
  if (!haveRound_ || state_ == State::kJoining || state_ == State::kFinished) return;
  if (queryInFlight_) {
    requery_ = true;
    return;
  }
  queryInFlight_ = true;
  emit(action::QueryState{round_.round});
}

void Policy::on(const event::StateRead& e) {
  queryInFlight_ = false;
  onState(e.state);
  if (requery_) {
    requery_ = false;
    queryState();
  }
}

void Policy::onState(const rendezvous::JobState& s) {
  if (lingering_) {
    // This node serves the job's record: leave once every other agent has disconnected.
    othersAttached_ = std::max<std::int64_t>(0, s.agents - 1);
    if (othersAttached_ == 0) finish(lingerOutcome_);
    return;
  }
  if (state_ == State::kJoining || state_ == State::kFinished || shuttingDown_) return;
  if (s.final) {
    finishFailed(*s.final);
    return;
  }
  if (state_ == State::kFinishing) return;  // reading the failures of a job that failed
  if (s.succeeded && !(state_ == State::kDoneWaiting && *s.succeeded == round_.round)) {
    leaveFinishedWithout(*s.succeeded);
    return;
  }
  if (state_ == State::kDoneWaiting) {
    onStateDone(s);
    return;
  }
  if (s.round > round_.round) {
    if (state_ == State::kStopping) return;  // back here when the workers are gone
    log_->warn("agent: [{}] round {} is over; restarting into round {}", settings_.role,
               round_.round, s.round);
    emit(action::Record{
        "restart_decided",
        {{"round", round_.round}, {"next_round", s.round}, {"reason", restartCause(s)}}});
    transition(State::kStopping);
    stop(SIGTERM, "round " + std::to_string(round_.round) + " is over", AfterStop::kRejoin);
    return;
  }
  const bool roomForLate = s.waiting > 0 && round_.groupWorldSize < settings_.maxNodes;
  if ((s.gone > 0 || roomForLate) && s.done > 0) {
    // Some nodes' workers already succeeded in this round: it cannot restart without running
    // them again. This node's workers go on; a failure now ends the job.
    if (!noRestartSaid_) {
      noRestartSaid_ = true;
      log_->warn(
          "agent: [{}] a node {}, but {} node(s) already finished round {}: the round cannot "
          "restart; this node's workers go on",
          settings_.role, s.gone > 0 ? "left" : "is waiting to join", s.done, round_.round);
    }
    return;
  }
  if ((s.gone > 0 || roomForLate) && !advanceAsked_ &&
      (state_ == State::kRunning || state_ == State::kIdle)) {
    advanceAsked_ = true;
    log_->warn("agent: [{}] {}; starting a new round", settings_.role,
               s.gone > 0 ? "a node left the job" : "a new node is waiting to join");
    emit(action::Advance{round_.round});
  }
}

std::string Policy::restartCause(const rendezvous::JobState& s) const {
  // This node knows its own failures best (a hang among them); the others' come from the
  // round's claim.
  if (!localFailures_.empty()) {
    const bool hung = std::any_of(localFailures_.begin(), localFailures_.end(),
                                  [](const ProcessFailure& f) { return f.hang.has_value(); });
    return hung ? "worker_hung" : "worker_failure";
  }
  if (s.endedBy == "membership") return s.gone > 0 ? "node_left" : "node_joined";
  return "worker_failure";
}

void Policy::onStateDone(const rendezvous::JobState& s) {
  // A group that succeeded is final: whatever happens to the others, this node never starts its
  // workers again (a new round would re-run a finished script).
  if (s.done >= round_.groupWorldSize) {
    emit(action::Record{"shutdown", {{"reason", "succeeded"}, {"round", round_.round}}});
    linger(JobOutcome{Outcome::kSucceeded, 0, {}});
    return;
  }
  if (s.round > round_.round) {
    // Only a race gets here (the round ended just as this node's workers finished).
    log_->warn(
        "agent: [{}] round {} moved on to round {} after this node's workers succeeded; "
        "not running them again",
        settings_.role, round_.round, s.round);
    emit(action::Record{
        "shutdown", {{"reason", "succeeded"}, {"round", round_.round}, {"next_round", s.round}}});
    succeed();
    return;
  }
  if (s.gone > 0 && !exitBarrier_) {
    exitBarrier_ = true;
    log_->warn(
        "agent: [{}] {} node(s) stopped answering after this node's workers succeeded; waiting "
        "up to {} s for the others' outcome (this node's workers will not run again)",
        settings_.role, s.gone,
        std::chrono::duration_cast<std::chrono::seconds>(settings_.exitBarrierTimeout).count());
    emit(action::StartExitBarrier{settings_.exitBarrierTimeout});
  }
}

void Policy::on(const event::ExitBarrierExpired&) {
  if (state_ != State::kDoneWaiting) return;
  log_->warn(
      "agent: [{}] the other nodes' outcome is still unknown; this node's workers succeeded in "
      "round {}",
      settings_.role, round_.round);
  emit(action::Record{"shutdown",
                      {{"reason", "succeeded"}, {"round", round_.round}, {"others", "unknown"}}});
  succeed("the other nodes' outcome is unknown (--exit-barrier-timeout passed)");
}

void Policy::finishFailed(const std::string& finalJson) {
  if (state_ == State::kFinished || state_ == State::kFinishing) return;
  transition(State::kFinishing);
  std::int64_t round = round_.round;
  try {
    const auto final = nlohmann::json::parse(finalJson);
    round = final.value("round", round_.round);
    finalReason_ = final.value("reason", "");
  } catch (const nlohmann::json::exception& e) {
    log_->warn("agent: the job's final record is not JSON ({}); reporting round {}", e.what(),
               round);
  }
  stop(SIGTERM, std::nullopt, AfterStop::kReport);
  reportRound_ = round;
}

void Policy::on(const event::FailuresRead& e) {
  if (state_ == State::kFinished || lingering_) return;
  std::vector<ProcessFailure> failures = e.failures.empty() ? localFailures_ : e.failures;
  std::sort(failures.begin(), failures.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  JobOutcome outcome = failedJobOutcome(failures, !localFailures_.empty(), reportRound_);
  if (finalReason_ == "failed_after_success") {
    outcome.why += " (after some nodes had finished the round, which cannot restart)";
  } else if (finalReason_ == "max_restarts") {
    outcome.why +=
        " (the " + std::to_string(settings_.maxRestarts) + " restart(s) allowed are used up)";
  }
  if (!failures.empty()) emit(action::PrintReport{std::move(failures)});
  emit(action::Record{"shutdown", {{"reason", "failed"}, {"round", round_.round}}});
  linger(std::move(outcome));
}

void Policy::on(const event::Signal& e) {
  if (state_ == State::kFinished) return;
  if (lingering_ && isTerminatingSignal(e.signo)) {
    // The job is over and this node only serves its record: leave with the job's code.
    log_->warn("agent: received {}; leaving without waiting for the other agents",
               signalName(e.signo));
    finish(lingerOutcome_);
    return;
  }
  if (!isTerminatingSignal(e.signo)) {
    // SIGUSR1/SIGUSR2 and the like (Slurm's preemption warning): pass them on, keep running.
    log_->warn("agent: forwarding signal {} to the workers", signalName(e.signo));
    emit(action::SignalWorkers{e.signo});
    return;
  }
  if (shuttingDown_) {
    log_->warn("agent: second {}: killing the workers now", signalName(e.signo));
    emit(action::SignalWorkers{SIGKILL});
    return;
  }
  shuttingDown_ = true;
  stopOutcome_ = JobOutcome{Outcome::kSignaled, e.signo, "stopped by " + signalName(e.signo)};
  // Workers dying of the signal passed on are not failures: leave the running state first.
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) transition(State::kStopping);
  log_->warn("agent: received {} death signal, shutting down workers", signalName(e.signo));
  emit(action::Record{"shutdown", {{"reason", "signal"}, {"signal", e.signo}}});
  // The rendezvous stays open: this node's connection closing tells the others it left.
  stop(e.signo, std::nullopt, AfterStop::kFinish);
}

void Policy::on(const event::DoneReported& e) {
  doneReportPending_ = false;
  if (!lostWhileReporting_ || state_ != State::kDoneWaiting) return;
  log_->info("agent: this node's success {} the job's record before leaving",
             e.ok ? "reached" : "could not reach");
  leaveLostAfterSuccess(*lostWhileReporting_);
}

void Policy::finish(JobOutcome outcome) {
  if (state_ == State::kFinished) return;
  transition(State::kFinished);
  exitCode_ = exitCodeFor(outcome, settings_.exitCodes);
  outcome_ = outcome;
  emit(action::Finish{exitCode_, std::move(outcome)});
}

}  // namespace dtrun::agent
