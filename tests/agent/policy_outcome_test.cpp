// The outcome the policy ends with (agent/outcome.h maps it to the exit code) for every way a
// run ends, and the cause it records for each restart; driven by events alone.
#include <signal.h>
#include <spdlog/sinks/null_sink.h>

#include <catch2/catch.hpp>

#include "agent/policy.h"
#include "tests/agent/round_util.h"

using namespace dtrun::agent;
using dtrun::agent::testing::roundOf;
using dtrun::rendezvous::JobState;
using State = Policy::State;
using dtrun::ExitStatus;

namespace {

Policy policy(int nproc = 1) {
  PolicySettings s;
  s.hostname = "node7";
  s.entrypointName = "train.py";
  s.nprocPerNode = nproc;
  s.maxRestarts = 1;
  s.maxNodes = 3;
  return Policy(s, std::make_shared<spdlog::logger>(
                       "agent", std::make_shared<spdlog::sinks::null_sink_mt>()));
}

// The one Finish among `actions`, or a failed check.
JobOutcome finished(const std::vector<Action>& actions) {
  for (const auto& a : actions) {
    if (const auto* f = std::get_if<action::Finish>(&a)) {
      CHECK(f->code == exitCodeFor(f->outcome, ExitCodeScheme::kTorchrun));
      return f->outcome;
    }
  }
  FAIL("no Finish");
  return {};
}

void running(Policy& p, std::int64_t round = 0, int groupWorldSize = 2) {
  p.handle(event::Start{});
  p.handle(event::Joined{roundOf(round, 0, groupWorldSize, 1)});
  p.handle(event::WorkerStoreReady{WorkerStore{"10.0.0.1", 29400}});
  JobState s;
  s.round = round;
  p.handle(event::StateRead{s});
  REQUIRE(p.state() == State::kRunning);
}

JobState finalState(std::int64_t round) {
  JobState s;
  s.round = round;
  s.final = R"({"reason":"max_restarts","round":)" + std::to_string(round) + "}";
  return s;
}

ProcessFailure failure(int rank, const std::string& host, bool hung = false) {
  ProcessFailure f;
  f.rank = rank;
  f.host = host;
  f.exitCode = hung ? -9 : 3;
  f.timestampMs = 1000 + rank;
  if (hung) {
    Hang h;
    h.kind = "stall";
    h.signal = SIGKILL;
    f.hang = h;
  }
  return f;
}

// The job failed for good; this node then reads the failures `all` and reports.
JobOutcome endWith(Policy& p, const std::vector<ProcessFailure>& all) {
  p.handle(event::StateRead{finalState(0)});
  p.handle(event::WorkersStopped{});
  return finished(p.handle(event::FailuresRead{all}));
}

}  // namespace

TEST_CASE("outcome: a join that fails says why", "[agent][policy][outcome]") {
  SECTION("timed out, or the store never answered: the rendezvous never formed") {
    Policy p = policy();
    p.handle(event::Start{});
    const auto o = finished(p.handle(event::JoinFailed{"why", std::nullopt, {}}));
    CHECK(o.kind == Outcome::kRendezvousFailed);
    CHECK(o.why == "why");
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 4);
  }
  SECTION("the store went away during the join: the job was lost") {
    Policy p = policy();
    p.handle(event::Start{});
    const auto o = finished(p.handle(event::JoinFailed{"gone", std::nullopt, {}, true}));
    CHECK(o.kind == Outcome::kJobLost);
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 5);
  }
  SECTION("the job had succeeded without this node: 0 under every scheme") {
    Policy p = policy();
    p.handle(event::Start{});
    dtrun::rendezvous::JobRecord over;
    over.succeeded = 3;
    const auto o = finished(p.handle(event::JoinFailed{"over", over, {}}));
    CHECK(o.kind == Outcome::kFinishedWithoutThisNode);
    CHECK(o.why == "round 3 succeeded on the other nodes (this node never joined it)");
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 0);
    CHECK(exitCodeFor(o, ExitCodeScheme::kWorker) == 0);
  }
  SECTION("the job had failed for good: this node's rendezvous never formed") {
    Policy p = policy();
    p.handle(event::Start{});
    dtrun::rendezvous::JobRecord over;
    over.final = R"({"reason":"max_restarts","round":2})";
    const auto o = finished(p.handle(event::JoinFailed{"over", over, {}}));
    CHECK(o.kind == Outcome::kRendezvousFailed);
  }
}

TEST_CASE("outcome: the job's final failure, as this node saw it", "[agent][policy][outcome]") {
  SECTION("this node's worker failed: workers_failed, naming the root cause") {
    Policy p = policy();
    running(p);
    p.handle(event::WorkerExited{0, ExitStatus{3, std::nullopt}});
    p.handle(event::FailureCollected{failure(0, "node7")});
    const auto o = endWith(p, {failure(0, "node7"), failure(1, "node8")});
    CHECK(o.kind == Outcome::kWorkersFailed);
    CHECK_THAT(o.why,
               Catch::Matchers::StartsWith("round 0: rank 0 (local_rank 0, pid 0) on node7"));
    CHECK_THAT(o.why, Catch::Matchers::Contains("restart(s) allowed are used up"));
  }
  SECTION("only another node's worker failed: failed on another node") {
    Policy p = policy();
    running(p);
    const auto o = endWith(p, {failure(1, "node8")});
    CHECK(o.kind == Outcome::kFailedElsewhere);
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 6);
  }
  SECTION("the root cause hung, on whichever node: hung") {
    Policy p = policy();
    running(p);
    const auto o = endWith(p, {failure(1, "node8", true), failure(2, "node9")});
    CHECK(o.kind == Outcome::kHung);
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 3);
  }
}

TEST_CASE("outcome: signals, a lost job, and success", "[agent][policy][outcome]") {
  SECTION("a terminating signal") {
    Policy p = policy();
    running(p);
    p.handle(event::Signal{SIGTERM});
    const auto o = finished(p.handle(event::WorkersStopped{}));
    CHECK(o.kind == Outcome::kSignaled);
    CHECK(o.signal == SIGTERM);
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 143);
  }
  SECTION("the store went away, and its record could not be read") {
    Policy p = policy();
    running(p);
    p.handle(event::JobLost{"store at h:1: gone"});
    p.handle(event::WorkersStopped{});
    const auto o = finished(p.handle(event::JobRecordRead{std::nullopt, {}, "refused"}));
    CHECK(o.kind == Outcome::kJobLost);
    CHECK(o.why == "lost the rendezvous store at h:1: gone (refused)");
    CHECK(exitCodeFor(o, ExitCodeScheme::kDetailed) == 5);
  }
  SECTION("the store went away, and its record says the job failed on another node") {
    Policy p = policy();
    running(p);
    p.handle(event::JobLost{"store at h:1: gone"});
    p.handle(event::WorkersStopped{});
    dtrun::rendezvous::JobRecord record;
    record.final = R"({"reason":"max_restarts","round":0})";
    const auto o = finished(p.handle(event::JobRecordRead{record, {failure(1, "node8")}, ""}));
    CHECK(o.kind == Outcome::kFailedElsewhere);
  }
  SECTION("every node done") {
    Policy p = policy();
    running(p, 0, 1);
    p.handle(event::WorkerExited{0, ExitStatus{0, std::nullopt}});
    p.handle(event::DoneReported{true});
    JobState done;
    done.done = 1;
    CHECK(finished(p.handle(event::StateRead{done})).kind == Outcome::kSucceeded);
    CHECK(p.outcome().kind == Outcome::kSucceeded);
    CHECK(p.exitCode() == 0);
  }
}

TEST_CASE("outcome: each restart is recorded with its cause", "[agent][policy][outcome]") {
  auto causeOf = [](const std::vector<Action>& actions) -> std::string {
    for (const auto& a : actions) {
      const auto* r = std::get_if<action::Record>(&a);
      if (r && r->name == "restart_decided" && r->fields.contains("next_round")) {
        return r->fields.at("reason");
      }
    }
    return "";
  };
  JobState next;
  next.round = 1;
  SECTION("another node failed") {
    Policy p = policy();
    running(p);
    next.endedBy = "failure";
    CHECK(causeOf(p.handle(event::StateRead{next})) == "worker_failure");
  }
  SECTION("a node left, or one came") {
    Policy p = policy();
    running(p);
    next.endedBy = "membership";
    next.gone = 1;
    CHECK(causeOf(p.handle(event::StateRead{next})) == "node_left");
    Policy q = policy();
    running(q);
    next.gone = 0;
    next.waiting = 1;
    CHECK(causeOf(q.handle(event::StateRead{next})) == "node_joined");
  }
  SECTION("this node's own worker hung") {
    Policy p = policy();
    running(p);
    p.handle(event::WorkerExited{0, ExitStatus{0, SIGKILL}});
    p.handle(event::FailureCollected{failure(0, "node7", true)});
    p.handle(event::WorkersStopped{});
    next.endedBy = "failure";
    CHECK(causeOf(p.handle(event::StateRead{next})) == "worker_hung");
  }
}
