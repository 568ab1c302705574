// The agent's policy, driven by events alone: no process, socket, file or clock. Each case plays
// a job's story as the mechanisms would report it and checks what the policy asks for.
#include "agent/policy.h"

#include "tests/agent/policy_util.h"

using namespace dtrun::agent;
using namespace dtrun::agent::testing;
using dtrun::rendezvous::JobRecord;

TEST_CASE("a clean run: join, start, every worker succeeds, every node done, exit 0",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  CHECK(p.handle(event::WorkerExited{0, exitCode(0)}).empty());  // one of two is not the group
  auto last = p.handle(event::WorkerExited{1, exitCode(0)});
  CHECK(has<action::Sweep>(last));
  const auto done = only<action::MarkDone>(last);
  CHECK(done.round == 0);
  CHECK(done.groupWorldSize == 1);
  CHECK(p.state() == State::kDoneWaiting);

  CHECK(has<action::QueryState>(p.handle(event::JobChanged{})));
  JobState s = stateOf(0);
  s.done = 1;
  auto end = p.handle(event::StateRead{s});
  CHECK(recorded(end) == std::vector<std::string>{"shutdown"});
  CHECK(only<action::Finish>(end).code == 0);
  CHECK(p.state() == State::kFinished);
  CHECK(p.exitCode() == 0);
  // Nothing moves a finished agent.
  CHECK(p.handle(event::JobChanged{}).empty());
  CHECK(p.handle(event::Signal{SIGTERM}).empty());
}

TEST_CASE("a failed worker stops the group, is reported, and the node rejoins the next round",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  auto failed = p.handle(event::WorkerExited{1, exitCode(3)});
  CHECK(p.state() == State::kStopping);
  const auto collect = only<action::CollectFailure>(failed);
  CHECK(collect.localRank == 1);
  CHECK(collect.status.code == 3);
  const auto stop = only<action::StopWorkers>(failed);
  CHECK(stop.signo == SIGTERM);
  REQUIRE(stop.abortReason);
  CHECK(*stop.abortReason == "rank 1 on node7 failed with exit code 3");

  ProcessFailure f;
  f.rank = 1;
  f.exitCode = 3;
  const auto report = only<action::ReportFailure>(p.handle(event::FailureCollected{f}));
  CHECK(report.round == 0);
  CHECK(report.failure == f);

  // The stopped worker's exit is expected, not a second failure.
  CHECK(p.handle(event::WorkerExited{0, killedBy(SIGTERM)}).empty());
  auto stopped = p.handle(event::WorkersStopped{});
  CHECK(p.state() == State::kIdle);
  CHECK(only<action::QueryState>(stopped).round == 0);

  // The job opened round 1 (the failure counted): go there.
  auto next = p.handle(event::StateRead{stateOf(1)});
  CHECK(recorded(next) == std::vector<std::string>{"restart_decided"});
  CHECK(has<action::StopWorkers>(next));
  CHECK(has<action::Join>(p.handle(event::WorkersStopped{})));
  CHECK(p.state() == State::kJoining);
  REQUIRE(has<action::GetWorkerStore>(p.handle(event::Joined{roundOf(1)})));
  CHECK(has<action::StartWorkers>(p.handle(event::WorkerStoreReady{WorkerStore{"h", 1}})));
  CHECK(p.round().round == 1);
}

TEST_CASE("the abort reason names the global rank of a worker on a later node", "[agent][policy]") {
  Policy p(settings(2, 4), quiet());
  runRound(p, roundOf(5, /*groupRank=*/2, /*groupWorldSize=*/3));
  const auto stop = only<action::StopWorkers>(p.handle(event::WorkerExited{1, killedBy(SIGSEGV)}));
  REQUIRE(stop.abortReason);
  CHECK(*stop.abortReason == "rank 5 on node7 failed with signal 11 (SIGSEGV)");
}

TEST_CASE("a final job: workers stopped, failures read, the report printed, exit 1",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(2));
  JobState s = stateOf(2);
  s.final = R"({"reason":"max_restarts","round":2,"restarts":3,"max_restarts":3})";
  auto final = p.handle(event::StateRead{s});
  CHECK(p.state() == State::kFinishing);
  CHECK(only<action::StopWorkers>(final).signo == SIGTERM);
  CHECK(only<action::ReadFailures>(p.handle(event::WorkersStopped{})).round == 2);

  ProcessFailure late, early;
  late.rank = 3;
  early.rank = 1;
  auto report = p.handle(event::FailuresRead{{late, early}});
  const auto print = only<action::PrintReport>(report);
  REQUIRE(print.failures.size() == 2);
  CHECK(print.failures[0].rank == 1);  // by rank
  CHECK(recorded(report) == std::vector<std::string>{"shutdown"});
  CHECK(only<action::Finish>(report).code == 1);
}

TEST_CASE("the worker exit-code rule: the root cause's own code, 256-N for a signal",
          "[agent][policy]") {
  auto failure = [](int rank, int code, std::int64_t at) {
    ProcessFailure f;
    f.rank = rank;
    f.exitCode = code;
    f.timestampMs = at;
    return f;
  };
  // The outcome of a job that failed with these, as the policy makes it, mapped by the one
  // function that decides exit codes.
  auto failedJobExitCode = [](ExitCodeScheme scheme, const std::vector<ProcessFailure>& fs) {
    return exitCodeFor(failedJobOutcome(fs, true, 0), scheme);
  };
  // The first failure observed decides, whatever the ranks.
  const std::vector<ProcessFailure> two{failure(0, -15, 2000), failure(1, 3, 1000)};
  CHECK(failedJobExitCode(ExitCodeScheme::kWorker, two) == 3);
  CHECK(failedJobExitCode(ExitCodeScheme::kTorchrun, two) == 1);
  CHECK(failedJobExitCode(ExitCodeScheme::kWorker, {failure(1, -9, 5)}) == 247);
  CHECK(failedJobExitCode(ExitCodeScheme::kWorker, {failure(1, 255, 5)}) == 255);
  CHECK(failedJobExitCode(ExitCodeScheme::kWorker, {}) == 1);

  // The policy finishes with it.
  auto s = settings();
  s.exitCodes = ExitCodeScheme::kWorker;
  Policy p(s, quiet());
  runRound(p, roundOf(0));
  JobState st = stateOf(0);
  st.final = R"({"round":0})";
  p.handle(event::StateRead{st});
  p.handle(event::WorkersStopped{});
  CHECK(only<action::Finish>(p.handle(event::FailuresRead{two})).code == 3);
  CHECK(p.exitCode() == 3);
}

TEST_CASE("a final record that is not JSON still ends the job with the current round",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(4));
  JobState s = stateOf(4);
  s.final = "{not json";
  CHECK(has<action::StopWorkers>(p.handle(event::StateRead{s})));
  CHECK(only<action::ReadFailures>(p.handle(event::WorkersStopped{})).round == 4);
}

TEST_CASE("without failures from the job the node reports its own", "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  p.handle(event::WorkerExited{0, exitCode(1)});
  ProcessFailure mine;
  mine.rank = 0;
  mine.exitCode = 1;
  p.handle(event::FailureCollected{mine});
  p.handle(event::WorkersStopped{});
  JobState s = stateOf(0);
  s.final = R"({"round":0})";
  p.handle(event::StateRead{s});
  p.handle(event::WorkersStopped{});
  const auto print = only<action::PrintReport>(p.handle(event::FailuresRead{}));
  REQUIRE(print.failures.size() == 1);
  CHECK(print.failures[0] == mine);
}

TEST_CASE("a terminating signal stops the workers with it and exits 1, a second one kills",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  auto first = p.handle(event::Signal{SIGINT});
  CHECK(p.state() == State::kStopping);
  CHECK(only<action::StopWorkers>(first).signo == SIGINT);
  CHECK_FALSE(only<action::StopWorkers>(first).abortReason);
  CHECK(recorded(first) == std::vector<std::string>{"shutdown"});
  CHECK(has<action::Join>(first) == false);

  CHECK(only<action::SignalWorkers>(p.handle(event::Signal{SIGTERM})).signo == SIGKILL);
  // Workers dying of the signal are not failures, and the job's news no longer matters.
  CHECK(p.handle(event::WorkerExited{0, killedBy(SIGINT)}).empty());
  CHECK(p.handle(event::StateRead{stateOf(1)}).empty());
  CHECK(only<action::Finish>(p.handle(event::WorkersStopped{})).code == 1);
}

TEST_CASE("a signal while a failed group is stopping finishes instead of rejoining",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  p.handle(event::WorkerExited{0, exitCode(2)});
  CHECK(has<action::StopWorkers>(p.handle(event::Signal{SIGTERM})));
  // Both stops complete; the first completion finishes, the second finds nothing to do.
  CHECK(only<action::Finish>(p.handle(event::WorkersStopped{})).code == 1);
  CHECK(p.handle(event::WorkersStopped{}).empty());
}

TEST_CASE("other signals are passed on and nothing stops", "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  for (int sig : {SIGUSR1, SIGUSR2}) {
    auto acts = p.handle(event::Signal{sig});
    REQUIRE(acts.size() == 1);
    CHECK(only<action::SignalWorkers>(acts).signo == sig);
  }
  CHECK(p.state() == State::kRunning);
}

TEST_CASE("losing the job: stop the workers, read the outcome, close it, exit 1",
          "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  auto lost = p.handle(event::JobLost{"store at 10.0.0.1:29400: connection reset"});
  CHECK(has<action::ReadJobRecord>(lost));
  CHECK(only<action::StopWorkers>(lost).signo == SIGTERM);
  CHECK_FALSE(has<action::CloseJob>(lost));                            // the outcome is read first
  CHECK(p.handle(event::WorkerExited{1, killedBy(SIGTERM)}).empty());  // not a failure
  CHECK(p.handle(event::WorkersStopped{}).empty());  // the outcome is not known yet
  auto end = p.handle(event::JobRecordRead{std::nullopt, {}, "connection refused"});
  CHECK(has<action::CloseJob>(end));
  CHECK(recorded(end) == std::vector<std::string>{"shutdown"});
  CHECK(only<action::Finish>(end).code == 1);
}

TEST_CASE("a member gone or a late node with room: one advance per round", "[agent][policy]") {
  Policy p(settings(2, 4), quiet());
  runRound(p, roundOf(0, 0, 2));
  JobState gone = stateOf(0);
  gone.gone = 1;
  CHECK(only<action::Advance>(p.handle(event::StateRead{gone})).round == 0);
  p.handle(event::JobChanged{});
  CHECK_FALSE(has<action::Advance>(p.handle(event::StateRead{gone})));

  Policy q(settings(2, 2), quiet());
  runRound(q, roundOf(0, 0, 2));
  JobState late = stateOf(0);
  late.waiting = 1;
  CHECK(q.handle(event::StateRead{late}).empty());  // full at MAX: the late node waits
  Policy r(settings(2, 3), quiet());
  runRound(r, roundOf(0, 0, 2));
  CHECK(has<action::Advance>(r.handle(event::StateRead{late})));
}

TEST_CASE("one state query at a time, a change meanwhile asks once more", "[agent][policy]") {
  Policy p(settings(), quiet());
  REQUIRE(has<action::Join>(p.handle(event::Start{})));
  CHECK(p.handle(event::JobChanged{}).empty());  // no round yet: nothing to ask
  p.handle(event::Joined{roundOf(0)});
  auto started = p.handle(event::WorkerStoreReady{WorkerStore{"h", 1}});
  CHECK(all<action::QueryState>(started).size() == 1);
  CHECK(p.handle(event::JobChanged{}).empty());
  CHECK(p.handle(event::JobChanged{}).empty());
  CHECK(all<action::QueryState>(p.handle(event::StateRead{stateOf(0)})).size() == 1);
  CHECK(p.handle(event::StateRead{stateOf(0)}).empty());
}

TEST_CASE("the store's host waits for the others after success, bounded by close_timeout",
          "[agent][policy]") {
  auto s = settings(2, 2);
  s.servesOthers = true;
  Policy p(s, quiet());
  runRound(p, roundOf(0, 0, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  JobState done = stateOf(0);
  done.done = 2;
  done.agents = 2;  // the other agent is still attached
  auto waiting = p.handle(event::StateRead{done});
  CHECK(p.state() == State::kFinishing);
  CHECK(only<action::StartFinishTimer>(waiting).after == std::chrono::seconds(30));
  CHECK(has<action::QueryState>(waiting));
  CHECK_FALSE(has<action::Finish>(waiting));
  // Losing the job now is the others leaving: not an error for the host.
  CHECK(p.handle(event::JobLost{"store: closed"}).empty());
  JobState left = done;
  left.agents = 1;  // this node alone
  CHECK(only<action::Finish>(p.handle(event::StateRead{left})).code == 0);

  Policy q(s, quiet());
  runRound(q, roundOf(0, 0, 2));
  q.handle(event::WorkerExited{0, exitCode(0)});
  q.handle(event::WorkerExited{1, exitCode(0)});
  q.handle(event::StateRead{done});
  CHECK(only<action::Finish>(q.handle(event::FinishTimerExpired{})).code == 0);
}

TEST_CASE("a node that is not the host leaves as soon as every node is done", "[agent][policy]") {
  Policy p(settings(2, 2), quiet());
  runRound(p, roundOf(0, 1, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  JobState done = stateOf(0);
  done.done = 1;
  CHECK(p.handle(event::StateRead{done}).empty());  // the other node is still running
  done.done = 2;
  CHECK(only<action::Finish>(p.handle(event::StateRead{done})).code == 0);
}

TEST_CASE("rendezvous and MASTER_ADDR failures end the node with exit 1", "[agent][policy]") {
  Policy p(settings(), quiet());
  p.handle(event::Start{});
  auto failed = p.handle(event::JoinFailed{"rendezvous: round 0 timed out"});
  CHECK(recorded(failed) == std::vector<std::string>{"shutdown"});
  CHECK(all<action::Record>(failed)[0]->fields.at("reason") == "rendezvous_failed");
  CHECK(only<action::Finish>(failed).code == 1);

  Policy q(settings(), quiet());
  q.handle(event::Start{});
  q.handle(event::Joined{roundOf(0)});
  CHECK(only<action::Finish>(q.handle(event::WorkerStoreFailed{"no such key"})).code == 1);
}

TEST_CASE("answers that come too late are ignored", "[agent][policy]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  CHECK(p.handle(event::Joined{roundOf(7)}).empty());
  CHECK(p.handle(event::WorkerStoreReady{WorkerStore{"x", 2}}).empty());
  CHECK(p.handle(event::JoinFailed{"late"}).empty());
  CHECK(p.round().round == 0);
}

namespace {

Hang timerHang(int pid, int signo = SIGKILL) {
  Hang h;
  h.kind = "timer";
  h.scopeId = "train.py#12";
  h.pid = pid;
  h.deadlineMs = 1796012047250;
  h.overstayMs = 3;
  h.signal = signo;
  return h;
}

ProcessFailure failureOf(int localRank, int exitCode) {
  ProcessFailure f;
  f.localRank = localRank;
  f.rank = localRank;
  f.exitCode = exitCode;
  return f;
}

}  // namespace

TEST_CASE("a file-timer expiry kills the worker's group, its failure is reported as a hang",
          "[agent][policy][hang]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  auto expired = p.handle(event::TimerExpired{1, timerHang(4242)});
  const auto kill = only<action::KillHung>(expired);
  CHECK(kill.localRanks == std::vector<int>{1});
  CHECK(kill.signo == SIGKILL);
  CHECK_FALSE(kill.stacks);
  CHECK(recorded(expired) == std::vector<std::string>{"worker_hung"});
  CHECK(p.state() == State::kRunning);  // the kill's exit drives the rest

  // The worker dies of it: the usual failure path, with the hang attached to the report.
  auto died = p.handle(event::WorkerExited{1, killedBy(SIGKILL)});
  CHECK(only<action::CollectFailure>(died).localRank == 1);
  CHECK(has<action::StopWorkers>(died));
  const auto report =
      only<action::ReportFailure>(p.handle(event::FailureCollected{failureOf(1, -9)}));
  REQUIRE(report.failure.hang);
  CHECK(*report.failure.hang == timerHang(4242));
  // The next round starts clean: a later failure of local rank 1 is no hang.
  p.handle(event::WorkersStopped{});
  JobState next = stateOf(1);
  p.handle(event::StateRead{next});
  runRound(p, roundOf(1));
  p.handle(event::WorkerExited{1, exitCode(2)});
  CHECK_FALSE(
      only<action::ReportFailure>(p.handle(event::FailureCollected{failureOf(1, 2)})).failure.hang);
}

TEST_CASE("hang stacks: asked for before the kill, they land in the report",
          "[agent][policy][hang]") {
  auto s = settings();
  s.dumpStacks = true;
  Policy p(s, quiet());
  runRound(p, roundOf(0));
  const auto kill = only<action::KillHung>(p.handle(event::TimerExpired{0, timerHang(77)}));
  CHECK(kill.stacks);
  CHECK(kill.stackPids == std::vector<int>{77});
  CHECK(p.handle(event::StacksCollected{{0}, "Python stacks of pid 77:\n  File \"t.py\""}).empty());
  p.handle(event::WorkerExited{0, killedBy(SIGKILL)});
  const auto report =
      only<action::ReportFailure>(p.handle(event::FailureCollected{failureOf(0, -9)}));
  REQUIRE(report.failure.hang);
  CHECK_THAT(report.failure.hang->stacks, Catch::Contains("pid 77"));
}

TEST_CASE("a timer without a signal is only recorded, a late expiry is ignored",
          "[agent][policy][hang]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  auto watched = p.handle(event::TimerExpired{0, timerHang(5, 0)});
  CHECK_FALSE(has<action::KillHung>(watched));
  CHECK(recorded(watched) == std::vector<std::string>{"timer_expired"});
  CHECK(p.state() == State::kRunning);
  p.handle(event::WorkerExited{0, exitCode(1)});  // stopping now
  CHECK(p.handle(event::TimerExpired{1, timerHang(6)}).empty());
}

TEST_CASE("a stalled group: every worker killed, the report says it stalled",
          "[agent][policy][hang]") {
  Policy p(settings(3), quiet());
  runRound(p, roundOf(0, 0, 1, 3));
  auto stalled = p.handle(event::Stalled{1796012047000, std::chrono::milliseconds(600000)});
  const auto kill = only<action::KillHung>(stalled);
  CHECK(kill.localRanks == std::vector<int>{0, 1, 2});
  CHECK(kill.signo == SIGKILL);
  CHECK(recorded(stalled) == std::vector<std::string>{"worker_group_stalled"});
  p.handle(event::WorkerExited{2, killedBy(SIGKILL)});
  const auto report =
      only<action::ReportFailure>(p.handle(event::FailureCollected{failureOf(2, -9)}));
  REQUIRE(report.failure.hang);
  CHECK(report.failure.hang->kind == "stall");
  CHECK(report.failure.hang->overstayMs == 600000);
  // Not running any more: a second stall signal means nothing.
  CHECK(p.handle(event::Stalled{0, std::chrono::milliseconds(1)}).empty());
}

TEST_CASE("a node lost while reporting its success puts it on record before it leaves",
          "[agent][policy][done]") {
  // The fault soak's node B: SIGSTOPped while its workers ran, resumed, its workers succeed and
  // the store has meanwhile dropped its heartbeat: the others wait for B's success, so B reports
  // it before leaving, within the exit barrier.
  auto s = settings(2, 2);
  s.exitBarrierTimeout = std::chrono::seconds(30);
  Policy p(s, quiet());
  runRound(p, roundOf(0, 1, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  auto done = p.handle(event::WorkerExited{1, exitCode(0)});
  REQUIRE(has<action::MarkDone>(done));
  auto lost = p.handle(event::JobLost{"the store dropped this agent"});
  CHECK_FALSE(has<action::Finish>(lost));
  CHECK_FALSE(has<action::CloseJob>(lost));
  CHECK(only<action::StartExitBarrier>(lost).after == std::chrono::seconds(30));
  SECTION("the report lands: then it reads the outcome and leaves with 0") {
    auto reported = p.handle(event::DoneReported{true});
    CHECK(has<action::ReadJobRecord>(reported));
    JobRecord succeeded;
    succeeded.succeeded = 0;
    auto left = p.handle(event::JobRecordRead{succeeded, {}, ""});
    CHECK(has<action::CloseJob>(left));
    CHECK(only<action::Finish>(left).code == 0);
  }
  SECTION("the report fails: it leaves with 0 all the same (its workers succeeded)") {
    CHECK(has<action::ReadJobRecord>(p.handle(event::DoneReported{false})));
    CHECK(only<action::Finish>(p.handle(event::JobRecordRead{std::nullopt, {}, "gone"})).code == 0);
  }
  SECTION("the report hangs: the exit barrier ends the wait") {
    CHECK(only<action::Finish>(p.handle(event::ExitBarrierExpired{})).code == 0);
    CHECK(p.handle(event::DoneReported{true}).empty());
  }
}

TEST_CASE("a group that succeeded is final: a node gone does not restart it",
          "[agent][policy][done]") {
  auto s = settings(2, 2);
  s.exitBarrierTimeout = std::chrono::seconds(40);
  Policy p(s, quiet());
  runRound(p, roundOf(0, 0, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  REQUIRE(p.state() == State::kDoneWaiting);
  CHECK(p.handle(event::DoneReported{true}).empty());
  // The other node's lease lapsed: no advance, a bounded wait instead, once.
  JobState gone = stateOf(0);
  gone.gone = 1;
  gone.done = 1;
  p.handle(event::JobChanged{});
  auto waiting = p.handle(event::StateRead{gone});
  CHECK_FALSE(has<action::Advance>(waiting));
  CHECK(only<action::StartExitBarrier>(waiting).after == std::chrono::seconds(40));
  p.handle(event::JobChanged{});
  CHECK(p.handle(event::StateRead{gone}).empty());
  SECTION("the other node reports after all (resumed): exit 0") {
    JobState both = gone;
    both.done = 2;
    p.handle(event::JobChanged{});
    CHECK(only<action::Finish>(p.handle(event::StateRead{both})).code == 0);
  }
  SECTION("it never does: exit 0 when the wait ends, this node's workers never restarted") {
    auto end = p.handle(event::ExitBarrierExpired{});
    CHECK(only<action::Finish>(end).code == 0);
    CHECK_FALSE(has<action::Join>(end));
  }
  SECTION("the job is lost meanwhile, its outcome unreadable: exit 0, what this node knows") {
    auto lost = p.handle(event::JobLost{"store gone"});
    CHECK(has<action::ReadJobRecord>(lost));
    CHECK_FALSE(has<action::StopWorkers>(lost));
    auto end = p.handle(event::JobRecordRead{std::nullopt, {}, "connection refused"});
    CHECK(has<action::CloseJob>(end));
    CHECK(only<action::Finish>(end).code == 0);
  }
  SECTION("the round moved on anyway (a race): not rejoined") {
    p.handle(event::JobChanged{});
    auto moved = p.handle(event::StateRead{stateOf(1)});
    CHECK_FALSE(has<action::Join>(moved));
    CHECK(only<action::Finish>(moved).code == 0);
  }
  SECTION("the job failed elsewhere: the report, exit 1") {
    JobState final = gone;
    final.final = R"({"reason":"failed_after_success","round":0})";
    p.handle(event::JobChanged{});
    CHECK(has<action::StopWorkers>(p.handle(event::StateRead{final})));
    CHECK(only<action::ReadFailures>(p.handle(event::WorkersStopped{})).round == 0);
  }
}

TEST_CASE("a round some node finished is not restarted for a member that left",
          "[agent][policy][done]") {
  Policy p(settings(2, 3), quiet());
  runRound(p, roundOf(0, 0, 3));
  JobState s = stateOf(0);
  s.gone = 1;
  SECTION("control: the same state without a finished node restarts the round") {
    p.handle(event::JobChanged{});
    CHECK(only<action::Advance>(p.handle(event::StateRead{s})).round == 0);
    CHECK(p.state() == State::kRunning);
  }
  SECTION("with one: no advance, no stop, the workers go on, however often it is read") {
    s.done = 1;
    for (int read = 0; read < 2; ++read) {
      INFO("read " << read);
      p.handle(event::JobChanged{});
      CHECK(p.handle(event::StateRead{s}).empty());
      CHECK(p.state() == State::kRunning);
    }
    // The round still ends the ordinary way: this node's workers succeed and it marks done.
    CHECK(p.handle(event::WorkerExited{0, exitCode(0)}).empty());
    CHECK(only<action::MarkDone>(p.handle(event::WorkerExited{1, exitCode(0)})).round == 0);
    CHECK(p.state() == State::kDoneWaiting);
  }
}

TEST_CASE("a node that lost the job after its workers succeeded exits 0", "[agent][policy][done]") {
  // Resumed after a long stop: the heartbeat has failed, and the workers exited 0 meanwhile;
  // the job's loss may be seen before their exits.
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  CHECK(has<action::StopWorkers>(p.handle(event::JobLost{"dropped after 15 s of silence"})));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  CHECK(p.handle(event::JobRecordRead{JobRecord{}, {}, ""}).size() == 1);  // CloseJob
  CHECK(only<action::Finish>(p.handle(event::WorkersStopped{})).code == 0);
}
