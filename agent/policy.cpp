#include "agent/policy.h"

#include <signal.h>

#include <algorithm>

#include "common/signals.h"

namespace dtrun::agent {
namespace {

bool terminating(int signo) {
  return signo == SIGTERM || signo == SIGINT || signo == SIGHUP || signo == SIGQUIT;
}

}  // namespace

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
  if (state_ != State::kJoining) return;
  round_ = e.round;
  haveRound_ = true;
  localFailures_.clear();
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
  if (state_ != State::kJoining) return;
  log_->error("rendezvous failed: {}", e.why);
  emit(action::Record{"shutdown", {{"reason", "rendezvous_failed"}, {"error", e.why}}});
  finish(1);
}

void Policy::on(const event::WorkerStoreReady& e) {
  if (state_ != State::kJoining) return;
  transition(State::kRunning);
  running_ = settings_.nprocPerNode;
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
  finish(1);
}

void Policy::on(const event::WorkerExited& e) {
  if (running_ > 0) --running_;
  if (state_ != State::kRunning) return;  // expected: they are being stopped
  if (e.status.success()) {
    if (running_ > 0) return;
    emit(action::Sweep{});
    log_->info("agent: [{}] local worker group finished (SUCCEEDED); waiting for the other nodes",
               settings_.role);
    transition(State::kDoneWaiting);
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
  localFailures_.push_back(e.failure);
  emit(action::ReportFailure{round_.round, e.failure});
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
      finish(1);
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
  if (state_ == State::kJoining || state_ == State::kFinished || shuttingDown_) return;
  if (s.final) {
    finishFailed(*s.final);
    return;
  }
  if (state_ == State::kFinishing) {
    // This node serves the others: leave once every other member has disconnected.
    if (s.gone >= round_.groupWorldSize - 1) finish(0);
    return;
  }
  if (s.round > round_.round) {
    if (state_ == State::kStopping) return;  // back here when the workers are gone
    log_->warn("agent: [{}] round {} is over; restarting into round {}", settings_.role,
               round_.round, s.round);
    emit(action::Record{"restart_decided", {{"round", round_.round}, {"next_round", s.round}}});
    transition(State::kStopping);
    stop(SIGTERM, "round " + std::to_string(round_.round) + " is over", AfterStop::kRejoin);
    return;
  }
  if (state_ == State::kDoneWaiting && s.done >= round_.groupWorldSize) {
    emit(action::Record{"shutdown", {{"reason", "succeeded"}, {"round", round_.round}}});
    if (settings_.servesOthers && round_.groupWorldSize > 1) {
      // The others still need this node to learn that the job is done; wait for them to go,
      // but not for ever.
      transition(State::kFinishing);
      emit(action::StartFinishTimer{settings_.closeTimeout});
      queryState();
      return;
    }
    finish(0);
    return;
  }
  const bool roomForLate = s.waiting > 0 && round_.groupWorldSize < settings_.maxNodes;
  if ((s.gone > 0 || roomForLate) && !advanceAsked_ &&
      (state_ == State::kRunning || state_ == State::kDoneWaiting || state_ == State::kIdle)) {
    advanceAsked_ = true;
    log_->warn("agent: [{}] {}; starting a new round", settings_.role,
               s.gone > 0 ? "a node left the job" : "a new node is waiting to join");
    emit(action::Advance{round_.round});
  }
}

void Policy::finishFailed(const std::string& finalJson) {
  if (state_ == State::kFinished || state_ == State::kFinishing) return;
  transition(State::kFinishing);
  std::int64_t round = round_.round;
  try {
    round = nlohmann::json::parse(finalJson).value("round", round_.round);
  } catch (const nlohmann::json::exception& e) {
    log_->warn("agent: the job's final record is not JSON ({}); reporting round {}", e.what(),
               round);
  }
  stop(SIGTERM, std::nullopt, AfterStop::kReport);
  reportRound_ = round;
}

void Policy::on(const event::FailuresRead& e) {
  if (state_ == State::kFinished) return;
  std::vector<ProcessFailure> failures = e.failures.empty() ? localFailures_ : e.failures;
  std::sort(failures.begin(), failures.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (!failures.empty()) emit(action::PrintReport{std::move(failures)});
  emit(action::Record{"shutdown", {{"reason", "failed"}, {"round", round_.round}}});
  finish(1);
}

void Policy::on(const event::JobLost& e) {
  queryInFlight_ = false;
  if (state_ == State::kFinished) return;
  if (state_ == State::kFinishing && settings_.servesOthers) return;
  log_->error("agent: lost the rendezvous {}", e.why);
  emit(action::Record{"shutdown", {{"reason", "store_lost"}, {"error", e.why}}});
  shuttingDown_ = true;
  // The workers stopped now are not failures.
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) transition(State::kStopping);
  emit(action::CloseJob{});
  stop(SIGTERM, std::nullopt, AfterStop::kFinish);
}

void Policy::on(const event::Signal& e) {
  if (state_ == State::kFinished) return;
  if (!terminating(e.signo)) {
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
  // Workers dying of the signal passed on are not failures: leave the running state first.
  if (state_ == State::kRunning || state_ == State::kDoneWaiting) transition(State::kStopping);
  log_->warn("agent: received {} death signal, shutting down workers", signalName(e.signo));
  emit(action::Record{"shutdown", {{"reason", "signal"}, {"signal", e.signo}}});
  // The rendezvous stays open: this node's connection closing tells the others it left.
  stop(e.signo, std::nullopt, AfterStop::kFinish);
}

void Policy::on(const event::FinishTimerExpired&) {
  if (state_ == State::kFinishing) finish(0);
}

void Policy::finish(int code) {
  if (state_ == State::kFinished) return;
  transition(State::kFinished);
  exitCode_ = code;
  emit(action::Finish{code});
}

}  // namespace dtrun::agent
