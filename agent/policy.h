// Policy: what the agent does on each event, as a pure state machine. It touches no process,
// socket, file or clock: it takes an Event (a worker exited, the job's state was read, a signal
// came, ...) and returns the Actions the mechanism must carry out (start workers, stop them, ask
// the job to advance, finish ...). The mechanism (agent/agent.h) runs the actions and turns what
// comes back into further events. Unit tests drive it with events alone (tests/agent/
// policy_test.cpp); docs/agent.md describes the split.
//
//   joining --(round closed, store known)--> running --(all local workers exit 0)--> done_waiting
//      ^                                         |                                       |
//      |                     (worker fails | round advanced |                  (every node done)
//      |                      final | signal | job lost)                                 v
//      |                                         v                                   finishing
//      +-------(round advanced)---------- stopping --(workers gone)--> idle              |
//                                                                         \              v
//                                                  (final | signal | lost) ------> finished
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/failure_report.h"
#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/outcome.h"
#include "common/exit_status.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/job_record.h"

namespace dtrun::agent {

/// What the agent can be told. Each comes from one mechanism.
namespace event {
struct Start {};  ///< run() began
struct Joined {   ///< the rendezvous closed a round with this node in it
  rendezvous::RoundInfo round;
};
struct JoinFailed {  ///< the rendezvous gave up (timeout, job already over, ...)
  std::string why;
  /// Set when the job was already over (JobOverError), with its final round's failures.
  std::optional<rendezvous::JobRecord> over = std::nullopt;
  std::vector<ProcessFailure> failures = {};
  bool lost = false;  ///< the store (or etcd) could not be reached any more
};
struct WorkerStoreReady {  ///< where this round's workers find their store
  WorkerStore store;
};
struct WorkerStoreFailed {
  std::string why;
};
struct WorkerExited {  ///< one worker of the current round exited (reaped)
  int localRank = 0;
  ExitStatus status;
};
struct FailureCollected {  ///< the report of a failed worker, its stderr tail read
  ProcessFailure failure;
};
struct WorkersStopped {};  ///< a StopWorkers completed: every worker exited, groups swept
struct JobChanged {};      ///< the job's state changed (read it)
struct StateRead {         ///< the answer to QueryState
  rendezvous::JobState state;
};
struct JobLost {  ///< the job cannot be reached any more (store gone, state read failed)
  std::string why;
};
struct JobRecordRead {  ///< the answer to ReadJobRecord (after JobLost)
  /// nullopt: it could not be read (`error` says why); not over(): the job was still going.
  std::optional<rendezvous::JobRecord> record = std::nullopt;
  std::vector<ProcessFailure> failures = {};  ///< the final round's, when it failed for good
  std::string error = {};
};
struct Signal {  ///< a signal from --signals-to-handle reached the agent
  int signo = 0;
};
struct FailuresRead {  ///< the answer to ReadFailures: every failure of the final round
  std::vector<ProcessFailure> failures;
};
struct FinishTimerExpired {};  ///< close_timeout passed while waiting for the others to leave
struct TimerExpired {          ///< a file-timer deadline of one worker's process passed
  int localRank = 0;
  Hang hang;  ///< kind "timer": the scope, the pid, the deadline, the overstay, the signal
};
struct Stalled {  ///< --stall-timeout passed without output or timer activity from the group
  std::int64_t lastSignMs = 0;  ///< epoch ms of the last output or timer request
  std::chrono::milliseconds quiet{0};
};
struct StacksCollected {  ///< the Python stacks a KillHung asked for (before the kill)
  std::vector<int> localRanks;
  std::string stacks;
};
struct ExitBarrierExpired {};  ///< --exit-barrier-timeout passed while waiting, done
struct DoneReported {  ///< the answer to MarkDone: this node's success is on record (or not)
  bool ok = false;
};
}  // namespace event

using Event =
    std::variant<event::Start, event::Joined, event::JoinFailed, event::WorkerStoreReady,
                 event::WorkerStoreFailed, event::WorkerExited, event::FailureCollected,
                 event::WorkersStopped, event::JobChanged, event::StateRead, event::JobLost,
                 event::Signal, event::FailuresRead, event::FinishTimerExpired, event::TimerExpired,
                 event::Stalled, event::StacksCollected, event::ExitBarrierExpired,
                 event::DoneReported, event::JobRecordRead>;

/// What the agent must do. Each is carried out by one mechanism.
namespace action {
struct Join {};            ///< JobLink::join -> Joined | JoinFailed
struct GetWorkerStore {};  ///< JobLink::workerStore for the current round -> WorkerStoreReady...
struct StartWorkers {      ///< spawn the round's workers (each exit -> WorkerExited)
  rendezvous::RoundInfo round;
  WorkerStore store;
};
struct CollectFailure {  ///< read the failed worker's stderr tail and error file -> Failure...
  int localRank = 0;
  ExitStatus status;
};
struct ReportFailure {  ///< JobLink::reportFailure: recorded job-wide, the round ends
  std::int64_t round = 0;
  ProcessFailure failure;
};
struct StopWorkers {  ///< `signo` to every group, SIGKILL after the grace -> WorkersStopped
  int signo = 0;
  /// Set: first tell native workers to abort their collectives (bounded), with this reason.
  std::optional<std::string> abortReason;
};
struct SignalWorkers {  ///< pass a signal on to every worker group, nothing else
  int signo = 0;
};
struct Sweep {};  ///< end what is left in the exited workers' groups, and adopted orphans
struct MarkDone {
  std::int64_t round = 0;
  int groupWorldSize = 0;
};
struct QueryState {  ///< JobLink::state -> StateRead | JobLost
  std::int64_t round = 0;
};
struct Advance {  ///< JobLink::advance: a membership change ends the round
  std::int64_t round = 0;
};
struct ReadFailures {  ///< JobLink::failures -> FailuresRead
  std::int64_t round = 0;
};
struct PrintReport {  ///< the job-wide failure report (stderr, the agent's error file)
  std::vector<ProcessFailure> failures;
};
struct StartFinishTimer {  ///< FinishTimerExpired after `after`
  std::chrono::milliseconds after{0};
};
struct Record {  ///< one line of the event log
  std::string name;
  nlohmann::json fields;
};
struct KillHung {  ///< end hung workers: `signo` to each one's group, SIGKILL after the grace
  std::vector<int> localRanks;
  int signo = SIGKILL;
  /// Ask these processes and the workers for their Python stacks first (StacksCollected, then
  /// the signal); empty with stacks off.
  bool stacks = false;
  std::vector<int> stackPids;
};
struct StartExitBarrier {  ///< ExitBarrierExpired after `after`
  std::chrono::milliseconds after{0};
};
struct ReadJobRecord {};  ///< JobLink::readRecord: what the job left on record -> JobRecordRead
struct CloseJob {};       ///< JobLink::close: release the job (the others see this node leave)
struct Finish {           ///< stop everything; dtrun exits with `code`
  int code = 1;           ///< exitCodeFor(outcome, PolicySettings::exitCodes)
  JobOutcome outcome;     ///< what happened (agent/outcome.h)
};
}  // namespace action

using Action =
    std::variant<action::Join, action::GetWorkerStore, action::StartWorkers, action::CollectFailure,
                 action::ReportFailure, action::StopWorkers, action::SignalWorkers, action::Sweep,
                 action::MarkDone, action::QueryState, action::Advance, action::ReadFailures,
                 action::PrintReport, action::StartFinishTimer, action::Record, action::KillHung,
                 action::StartExitBarrier, action::ReadJobRecord, action::CloseJob, action::Finish>;

/// What the policy needs to know of the configuration.
struct PolicySettings {
  std::string role = "default";
  std::string hostname;        ///< this node's name, for messages
  std::string entrypointName;  ///< the program, for messages
  int nprocPerNode = 1;
  int maxRestarts = 0;
  int maxNodes = 1;
  std::chrono::milliseconds closeTimeout = std::chrono::seconds(30);
  /// This node serves what the others read after their workers finished (JobLink::
  /// servesOthers): once the job is over, success or failure, it leaves only after every other
  /// agent did (JobState::agents), or after closeTimeout, so that late ones learn the outcome.
  bool servesOthers = false;
  bool dumpStacks = false;  ///< ask hung workers for their Python stacks before the kill
  /// How long a node whose workers all succeeded waits for the others' outcome once a member
  /// stopped answering (it never runs its workers again).
  std::chrono::milliseconds exitBarrierTimeout = std::chrono::seconds(300);
  ExitCodeScheme exitCodes = ExitCodeScheme::kTorchrun;  ///< how the outcome becomes the code
};

/// The outcome of a job that failed for good with `failures` (the final round's, any order;
/// `localFailed`: some of them are this node's): the root cause's, a hang (kHung) winning over
/// kFailedElsewhere; `why` names it. Pure.
JobOutcome failedJobOutcome(const std::vector<ProcessFailure>& failures, bool localFailed,
                            std::int64_t round);

class Policy {
 public:
  enum class State { kJoining, kRunning, kStopping, kDoneWaiting, kIdle, kFinishing, kFinished };

  /// `log` gets one line per decision (as torchrun's agent logs them).
  Policy(PolicySettings settings, std::shared_ptr<spdlog::logger> log);

  /// The actions `e` calls for, in order. Pure: no I/O but log lines.
  std::vector<Action> handle(const Event& e);

  State state() const { return state_; }
  /// The round this node is in (or last was in); meaningful once a round was joined.
  const rendezvous::RoundInfo& round() const { return round_; }
  /// dtrun's exit code once finished (PolicySettings::exitCodes).
  int exitCode() const { return exitCode_; }
  /// What happened, once finished.
  const JobOutcome& outcome() const { return outcome_; }
  static const char* name(State s);

 private:
  /// What to do once the workers being stopped are gone; a later request may only strengthen
  /// it (kFinish beats kReport beats kRejoin beats kIdle).
  enum class AfterStop { kNone, kIdle, kRejoin, kReport, kFinish };

  void on(const event::Start&);
  void on(const event::Joined& e);
  void on(const event::JoinFailed& e);
  void on(const event::WorkerStoreReady& e);
  void on(const event::WorkerStoreFailed& e);
  void on(const event::WorkerExited& e);
  void on(const event::FailureCollected& e);
  void on(const event::WorkersStopped&);
  void on(const event::JobChanged&);
  void on(const event::StateRead& e);
  void on(const event::JobLost& e);
  void on(const event::Signal& e);
  void on(const event::FailuresRead& e);
  void on(const event::FinishTimerExpired&);
  void on(const event::TimerExpired& e);
  void on(const event::Stalled& e);
  void on(const event::StacksCollected& e);
  void on(const event::ExitBarrierExpired&);
  void on(const event::DoneReported& e);
  void on(const event::JobRecordRead& e);
  /// Asks what the job left on record once it was lost with this node's workers all succeeded.
  void leaveLostAfterSuccess(const std::string& why);
  /// The job was lost: once its outcome is read and the workers are stopped, the exit that
  /// agrees with the outcome.
  void finishLost();
  /// The job succeeded in `round` without this node: stop what runs, then exit 0 saying so.
  void leaveFinishedWithout(std::int64_t round);
  void finishWithoutNode();
  /// The job is over with `outcome`: the store's host stays until the others left (bounded by
  /// closeTimeout), so late agents can read the outcome; any other node leaves now.
  void linger(JobOutcome outcome);

  void onState(const rendezvous::JobState& s);
  /// Why the round this node was in ended: worker_failure, worker_hung, node_left, node_joined.
  std::string restartCause(const rendezvous::JobState& s) const;
  /// Done waiting: the other nodes' outcome, without ever running this node's workers again.
  void onStateDone(const rendezvous::JobState& s);
  void transition(State next);
  void join();
  void queryState();
  /// Stops the workers (SIGTERM, native workers told to abort first), then `after`.
  void stop(int signo, std::optional<std::string> abortReason, AfterStop after);
  void finishFailed(const std::string& finalJson);
  void finish(JobOutcome outcome);
  void succeed(std::string why = {}) { finish(JobOutcome{Outcome::kSucceeded, 0, std::move(why)}); }
  template <typename A>
  void emit(A a) {
    out_.emplace_back(std::move(a));
  }

  PolicySettings settings_;
  std::shared_ptr<spdlog::logger> log_;
  std::vector<Action> out_;  // the actions of the event being handled

  State state_ = State::kJoining;
  rendezvous::RoundInfo round_;
  bool haveRound_ = false;
  int running_ = 0;                                // workers of the round not yet exited
  bool doneReportPending_ = false;                 // a MarkDone awaits its DoneReported
  std::optional<std::string> lostWhileReporting_;  // JobLost that came meanwhile
  bool queryInFlight_ = false;                     // one QueryState at a time ...
  bool requery_ = false;                           // ... and one more after it when asked meanwhile
  bool advanceAsked_ = false;                      // one membership Advance per round
  bool shuttingDown_ = false;                      // a terminating signal came, or the job was lost
  AfterStop afterStop_ = AfterStop::kNone;
  std::int64_t reportRound_ = 0;  // the final round, for kReport
  std::vector<ProcessFailure> localFailures_;
  std::map<int, Hang> hung_;    // local rank -> why dtrun ended it (this round)
  int succeeded_ = 0;           // workers of this round that exited 0 (in any state)
  bool lostJob_ = false;        // the stop under way is for a lost job
  bool exitBarrier_ = false;    // the bounded wait for the others' outcome has begun
  bool noRestartSaid_ = false;  // "this round cannot restart" logged once
  // The job was lost (lostJob_): why, whether its outcome is being read, what it was, and
  // whether the workers are stopped.
  std::string lostWhy_;
  bool recordPending_ = false;
  std::optional<event::JobRecordRead> lostRecord_;
  bool lostStopped_ = false;
  std::optional<std::int64_t> withoutNode_;  // the round the job succeeded in without this node
  bool lingering_ = false;                   // the host waits for the others to leave ...
  JobOutcome lingerOutcome_;                 // ... and then exits with this
  std::int64_t othersAttached_ = 0;          // agents besides this one, at the last state read
  JobOutcome stopOutcome_;   // what a stop for a signal (AfterStop::kFinish) ends with
  std::string finalReason_;  // the job's final record's reason (max_restarts, ...)
  int exitCode_ = 1;
  JobOutcome outcome_;
};

}  // namespace dtrun::agent
