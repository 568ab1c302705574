// The policy's exits once the job is over or lost (agent/policy.h): the store's host lingers
// until the other agents left, so that late ones can read the outcome; a node that lost the job
// reads what the job left on record before it leaves, so that its exit code and its last line
// agree with the job's (docs/rendezvous.md, "Late nodes").
#include <signal.h>

#include <algorithm>

#include "agent/policy.h"

namespace dtrun::agent {

void Policy::linger(JobOutcome outcome) {
  if (!settings_.servesOthers || !haveRound_) {
    finish(std::move(outcome));
    return;
  }
  // Agents that were stopped or cut off while the job ended still need this node's store to
  // learn how it ended; wait for them to go, but not for ever. The state read that follows
  // says how many are still attached (none: this node leaves at once).
  transition(State::kFinishing);
  lingering_ = true;
  lingerOutcome_ = std::move(outcome);
  emit(action::StartFinishTimer{settings_.closeTimeout});
  queryState();
}

void Policy::on(const event::JobLost& e) {
  queryInFlight_ = false;
  if (state_ == State::kFinished || lostJob_ || withoutNode_) return;
  if (state_ == State::kFinishing && settings_.servesOthers) return;
  if (state_ == State::kDoneWaiting) {
    // This node's workers all succeeded: the job cannot make them run again. Their success is
    // put on record first when that is still under way (the store may only have dropped this
    // node's heartbeat, as after a SIGSTOP, and the others wait for it), then this node leaves.
    if (doneReportPending_) {
      // Bounded: should the report hang on a store that is gone, the exit barrier ends it.
      if (!lostWhileReporting_) emit(action::StartExitBarrier{settings_.exitBarrierTimeout});
      if (!lostWhileReporting_) lostWhileReporting_ = e.why;
      return;
    }
    leaveLostAfterSuccess(e.why);
    return;
  }
  lostJob_ = true;
  lostWhy_ = e.why;
  // Whether the job went on, ended well or failed without this node decides the exit: the
  // workers stop meanwhile (they are not failures), and the record is read on a connection
  // of its own.
  log_->warn(
      "agent: [{}] lost the rendezvous {}; stopping the workers and reading how the job "
      "ended",
      settings_.role, e.why);
  shuttingDown_ = true;
  if (state_ == State::kRunning) transition(State::kStopping);
  recordPending_ = true;
  emit(action::ReadJobRecord{});
  stop(SIGTERM, std::nullopt, AfterStop::kFinish);
}

void Policy::on(const event::JobRecordRead& e) {
  if (!recordPending_ || state_ == State::kFinished) return;
  recordPending_ = false;
  lostRecord_ = e;
  emit(action::CloseJob{});
  finishLost();
}

void Policy::finishLost() {
  if (recordPending_ || !lostRecord_) return;
  const bool doneHere = state_ == State::kDoneWaiting;
  if (!doneHere && !lostStopped_) return;  // back here when the workers are gone
  const auto& o = lostRecord_->record;
  if (o && o->final) {
    const std::int64_t round = o->finalRound() >= 0 ? o->finalRound() : round_.round;
    log_->error("agent: [{}] the job failed for good (round {}) {}: {}", settings_.role, round,
                doneHere ? "after this node's workers succeeded" : "without this node", *o->final);
    std::vector<ProcessFailure> failures =
        lostRecord_->failures.empty() ? localFailures_ : lostRecord_->failures;
    std::sort(failures.begin(), failures.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    JobOutcome outcome = failedJobOutcome(failures, !localFailures_.empty(), round);
    if (!failures.empty()) emit(action::PrintReport{std::move(failures)});
    emit(action::Record{"shutdown", {{"reason", "failed"}, {"round", round}, {"error", lostWhy_}}});
    finish(std::move(outcome));
    return;
  }
  if (o && o->succeeded) {
    if (doneHere && *o->succeeded == round_.round) {
      log_->info("agent: [{}] the job succeeded (round {})", settings_.role, round_.round);
      emit(action::Record{"shutdown", {{"reason", "succeeded"}, {"round", round_.round}}});
      succeed();
      return;
    }
    withoutNode_ = *o->succeeded;
    finishWithoutNode();
    return;
  }
  const std::string unread = lostRecord_->error.empty() ? "" : " (" + lostRecord_->error + ")";
  if (doneHere) {
    // What the other nodes did is not known here.
    log_->warn(
        "agent: lost the rendezvous {} after this node's workers succeeded; the other "
        "nodes' outcome is unknown here{}",
        lostWhy_, unread);
    emit(action::Record{"shutdown",
                        {{"reason", "succeeded"},
                         {"round", round_.round},
                         {"others", "unknown"},
                         {"error", lostWhy_}}});
    succeed(
        "the job was lost after this node's workers succeeded; the other nodes' outcome is "
        "unknown: " +
        lostWhy_);
    return;
  }
  emit(action::Record{"shutdown", {{"reason", "store_lost"}, {"error", lostWhy_}}});
  if (succeeded_ == settings_.nprocPerNode) {
    // Every worker of this node had exited 0 before the job was lost (a node resumed after a
    // stop sees both at once): that is what this node knows.
    log_->warn("agent: [{}] lost the rendezvous {}; this node's workers all succeeded before",
               settings_.role, lostWhy_);
    succeed("this node's workers all succeeded before the job was lost: " + lostWhy_);
    return;
  }
  log_->error("agent: lost the rendezvous {}{}", lostWhy_, unread);
  finish(JobOutcome{Outcome::kJobLost, 0, "lost the rendezvous " + lostWhy_ + unread});
}

void Policy::leaveFinishedWithout(std::int64_t round) {
  withoutNode_ = round;
  shuttingDown_ = true;
  if (state_ == State::kJoining || state_ == State::kIdle) {
    finishWithoutNode();
    return;
  }
  // Workers of an older round may still run here: they stop first (they are not failures).
  transition(State::kStopping);
  stop(SIGTERM, std::nullopt, AfterStop::kFinish);
}

void Policy::finishWithoutNode() {
  const std::int64_t round = withoutNode_.value_or(-1);
  const std::string why =
      "round " + std::to_string(round) + " succeeded on the other nodes" +
      (haveRound_ ? " (this node was last in round " + std::to_string(round_.round) + ")"
                  : " (this node never joined it)");
  log_->warn("agent: [{}] the job finished without this node: {}", settings_.role, why);
  emit(action::Record{"shutdown",
                      {{"reason", "finished_without_node"},
                       {"round", round},
                       {"last_round", haveRound_ ? nlohmann::json(round_.round) : nullptr}}});
  // The summary line, the last, says "finished without this node" and then why.
  finish(JobOutcome{Outcome::kFinishedWithoutThisNode, 0, why});
}

void Policy::leaveLostAfterSuccess(const std::string& why) {
  // Did the others succeed too, or fail after this node's success? The record says; while it
  // is read, nothing runs here.
  if (recordPending_ || lostRecord_) return;
  lostWhy_ = why;
  recordPending_ = true;
  emit(action::ReadJobRecord{});
}

void Policy::on(const event::FinishTimerExpired&) {
  if (!lingering_ || state_ != State::kFinishing) return;
  log_->warn(
      "agent: [{}] {} other agent(s) of the job still attached after close_timeout "
      "({} s); leaving (they will find the store gone)",
      settings_.role, othersAttached_,
      std::chrono::duration_cast<std::chrono::seconds>(settings_.closeTimeout).count());
  finish(lingerOutcome_);
}

JobOutcome failedJobOutcome(const std::vector<ProcessFailure>& failures, bool localFailed,
                            std::int64_t round) {
  JobOutcome outcome{Outcome::kWorkersFailed, 0, "the job failed for good"};
  if (failures.empty()) return outcome;
  const ProcessFailure& root = failures[rootCauseIndex(failures)];
  outcome.why = "round " + std::to_string(round) + ": " + describeFailure(root);
  outcome.rootExitCode = root.exitCode;
  if (root.hang) {
    outcome.kind = Outcome::kHung;  // on whichever node: every node of the job says so
  } else if (!localFailed) {
    outcome.kind = Outcome::kFailedElsewhere;  // this node's workers succeeded or were stopped
  }
  return outcome;
}

}  // namespace dtrun::agent
