// The policy's exit when this node was not there at the job's end (stopped, cut off, slow to
// stop, or late): the exit code and the last record agree with what the job left on record.
// Events alone, as in policy_test.cpp.
#include "agent/policy.h"
#include "tests/agent/policy_util.h"

using namespace dtrun::agent;
using namespace dtrun::agent::testing;
using dtrun::rendezvous::JobRecord;

namespace {

JobRecord succeededIn(std::int64_t round) {
  JobRecord o;
  o.succeeded = round;
  return o;
}

JobRecord failedIn(std::int64_t round) {
  JobRecord o;
  o.final = R"({"reason":"max_restarts","round":)" + std::to_string(round) + "}";
  return o;
}

ProcessFailure failureOf(int rank) {
  ProcessFailure f;
  f.rank = rank;
  f.localRank = rank % 2;
  f.exitCode = 3;
  f.host = "node1";
  return f;
}

// The "shutdown" record of `actions` (there must be one).
nlohmann::json shutdownOf(const std::vector<Action>& actions) {
  for (const auto* r : all<action::Record>(actions)) {
    if (r->name == "shutdown") return r->fields;
  }
  FAIL("no shutdown record");
  return {};
}

}  // namespace

TEST_CASE("a node that lost the job learns it succeeded without it: exit 0, and says so",
          "[agent][policy][end]") {
  Policy p(settings(2, 3), quiet());
  runRound(p, roundOf(0, 1, 3));
  auto lost = p.handle(event::JobLost{"the store dropped this agent"});
  CHECK(has<action::StopWorkers>(lost));
  REQUIRE(has<action::ReadJobRecord>(lost));
  SECTION("the outcome first, then the workers stop") {
    auto read = p.handle(event::JobRecordRead{succeededIn(2), {}, ""});
    CHECK(has<action::CloseJob>(read));
    CHECK_FALSE(has<action::Finish>(read));  // its workers still run
    auto end = p.handle(event::WorkersStopped{});
    CHECK(only<action::Finish>(end).code == 0);
    CHECK(shutdownOf(end)["reason"] == "finished_without_node");
    CHECK(shutdownOf(end)["round"] == 2);
    CHECK(shutdownOf(end)["last_round"] == 0);
  }
  SECTION("the workers stop first, then the outcome") {
    CHECK(p.handle(event::WorkersStopped{}).empty());
    auto end = p.handle(event::JobRecordRead{succeededIn(2), {}, ""});
    CHECK(only<action::Finish>(end).code == 0);
    CHECK(shutdownOf(end)["reason"] == "finished_without_node");
  }
  CHECK(p.exitCode() == 0);
}

TEST_CASE("a node that lost the job learns it failed: the job's report, exit 1",
          "[agent][policy][end]") {
  Policy p(settings(2, 3), quiet());
  runRound(p, roundOf(0, 1, 3));
  p.handle(event::JobLost{"heartbeat failed"});
  p.handle(event::WorkersStopped{});
  auto end = p.handle(event::JobRecordRead{failedIn(3), {failureOf(5), failureOf(4)}, ""});
  const auto report = only<action::PrintReport>(end);
  REQUIRE(report.failures.size() == 2);
  CHECK(report.failures[0].rank == 4);  // by rank, as every node prints it
  CHECK(shutdownOf(end)["reason"] == "failed");
  CHECK(shutdownOf(end)["round"] == 3);
  CHECK(only<action::Finish>(end).code == 1);
}

TEST_CASE("a job still going when this node lost it: exit 1, the loss named",
          "[agent][policy][end]") {
  Policy p(settings(), quiet());
  runRound(p, roundOf(0));
  p.handle(event::JobLost{"store at h:1: heartbeat failed"});
  p.handle(event::WorkersStopped{});
  auto end = p.handle(event::JobRecordRead{JobRecord{}, {}, ""});  // read, and not over
  CHECK(shutdownOf(end)["reason"] == "store_lost");
  CHECK(only<action::Finish>(end).code == 1);
  // A second report of the same loss changes nothing.
  CHECK(p.handle(event::JobLost{"watch failed"}).empty());
}

TEST_CASE("a resumed node that sees a later round succeeded stops its workers and exits 0",
          "[agent][policy][end]") {
  Policy p(settings(2, 3), quiet());
  runRound(p, roundOf(0, 2, 3));
  JobState later = stateOf(2);
  later.succeeded = 2;
  p.handle(event::JobChanged{});
  auto seen = p.handle(event::StateRead{later});
  CHECK(only<action::StopWorkers>(seen).signo == SIGTERM);
  CHECK_FALSE(has<action::Join>(seen));  // a job that is over is not joined again
  CHECK(p.handle(event::WorkerExited{0, killedBy(SIGTERM)}).empty());
  auto end = p.handle(event::WorkersStopped{});
  CHECK(shutdownOf(end)["reason"] == "finished_without_node");
  CHECK(only<action::Finish>(end).code == 0);
}

TEST_CASE("a node whose own round succeeded is done, not 'without this node'",
          "[agent][policy][end]") {
  Policy p(settings(2, 2), quiet());
  runRound(p, roundOf(1, 1, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  JobState s = stateOf(1);
  s.done = 2;
  s.succeeded = 1;
  auto end = p.handle(event::StateRead{s});
  CHECK(shutdownOf(end)["reason"] == "succeeded");
  CHECK(only<action::Finish>(end).code == 0);
}

TEST_CASE("joining a job that is over: 0 when it succeeded, its report and 1 when it failed",
          "[agent][policy][end]") {
  Policy p(settings(), quiet());
  p.handle(event::Start{});
  auto ok = p.handle(event::JoinFailed{"the job has already finished", succeededIn(4), {}});
  CHECK(shutdownOf(ok)["reason"] == "finished_without_node");
  CHECK(shutdownOf(ok)["last_round"].is_null());  // it never joined a round
  CHECK(only<action::Finish>(ok).code == 0);

  Policy q(settings(), quiet());
  q.handle(event::Start{});
  auto failed =
      q.handle(event::JoinFailed{"the job has already failed", failedIn(1), {failureOf(0)}});
  CHECK(only<action::PrintReport>(failed).failures.size() == 1);
  CHECK(shutdownOf(failed)["reason"] == "failed");
  CHECK(only<action::Finish>(failed).code == 1);

  Policy r(settings(), quiet());
  r.handle(event::Start{});
  auto timeout = r.handle(event::JoinFailed{"timed out after 600 s", std::nullopt, {}});
  CHECK(shutdownOf(timeout)["reason"] == "rendezvous_failed");
  CHECK(only<action::Finish>(timeout).code == 1);
}

TEST_CASE("a node lost after its workers succeeded: exit 1 when the job failed after all",
          "[agent][policy][end][done]") {
  Policy p(settings(2, 2), quiet());
  runRound(p, roundOf(0, 1, 2));
  p.handle(event::WorkerExited{0, exitCode(0)});
  p.handle(event::WorkerExited{1, exitCode(0)});
  p.handle(event::DoneReported{true});
  auto lost = p.handle(event::JobLost{"store gone"});
  REQUIRE(has<action::ReadJobRecord>(lost));
  SECTION("another node failed after this one succeeded") {
    JobRecord o;
    o.final = R"({"reason":"failed_after_success","round":0,"done":1})";
    auto end = p.handle(event::JobRecordRead{o, {failureOf(0)}, ""});
    CHECK(has<action::PrintReport>(end));
    CHECK(only<action::Finish>(end).code == 1);
  }
  SECTION("every node succeeded") {
    auto end = p.handle(event::JobRecordRead{succeededIn(0), {}, ""});
    CHECK(shutdownOf(end)["reason"] == "succeeded");
    CHECK(only<action::Finish>(end).code == 0);
  }
}

TEST_CASE("the store's host keeps a failed job's record until the others left",
          "[agent][policy][end]") {
  auto s = settings(2, 2);
  s.servesOthers = true;
  Policy p(s, quiet());
  runRound(p, roundOf(0, 0, 2));
  JobState final = stateOf(0);
  final.final = R"({"reason":"max_restarts","round":0})";
  p.handle(event::JobChanged{});
  p.handle(event::StateRead{final});
  p.handle(event::WorkersStopped{});
  auto read = p.handle(event::FailuresRead{{failureOf(1)}});
  CHECK(has<action::PrintReport>(read));
  CHECK(has<action::StartFinishTimer>(read));
  CHECK(has<action::QueryState>(read));
  CHECK_FALSE(has<action::Finish>(read));
  SECTION("the other agent leaves: exit 1") {
    JobState attached = final;
    attached.agents = 2;
    CHECK(p.handle(event::StateRead{attached}).empty());
    p.handle(event::JobChanged{});
    attached.agents = 1;
    CHECK(only<action::Finish>(p.handle(event::StateRead{attached})).code == 1);
  }
  SECTION("it never does: exit 1 after close_timeout") {
    CHECK(only<action::Finish>(p.handle(event::FinishTimerExpired{})).code == 1);
  }
  SECTION("a SIGTERM meanwhile: exit 1 at once, no second stop") {
    auto sig = p.handle(event::Signal{SIGTERM});
    CHECK_FALSE(has<action::StopWorkers>(sig));
    CHECK(only<action::Finish>(sig).code == 1);
  }
}

TEST_CASE("a signal during the join: a round that closes after it starts no workers",
          "[agent][policy][end]") {
  Policy p(settings(), quiet());
  p.handle(event::Start{});
  CHECK(has<action::StopWorkers>(p.handle(event::Signal{SIGTERM})));
  CHECK(p.handle(event::Joined{roundOf(0)}).empty());
  CHECK(only<action::Finish>(p.handle(event::WorkersStopped{})).code == 1);
}
