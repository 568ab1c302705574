#include "agent/job_actions.h"

#include <spdlog/sinks/null_sink.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <variant>

#include "agent/local_job.h"
#include "tests/agent/round_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using namespace dtrun::agent;
using dtrun::agent::testing::envTestConfig;
using dtrun::test::readFile;
using dtrun::test::runUntil;
using dtrun::test::TempDir;

namespace {

// The job's actions on a real LocalJob, the events they turn into collected in order.
struct Bench {
  Bench() : config(envTestConfig(2)), logDir(std::string("/dev/null"), "job42") {
    LocalJobOptions o;
    o.nproc = 2;
    o.workerStore = {"127.0.0.1", 4321};
    job.emplace(io, o);
    events.emplace((dir.path() / "events.jsonl").string());
    log =
        std::make_shared<spdlog::logger>("agent", std::make_shared<spdlog::sinks::null_sink_mt>());
    streams.emplace(io, config, logDir, "node-a");
    failures.emplace(config, logDir, *streams, "node-a", log);
    actions.emplace(*job, *failures, *events, 1, log, [this](Event e) { got.push_back(e); });
  }
  // Runs `a` and the io until one more event came; returns it.
  Event step(Action a, const dtrun::rendezvous::RoundInfo& round = {}) {
    const auto before = got.size();
    REQUIRE(actions->run(a, round));
    CHECK(got.size() == before);  // answers come later, never inside run()
    REQUIRE(runUntil(io, [&] { return got.size() > before; }));
    return got.back();
  }

  TempDir dir;
  boost::asio::io_context io;
  LaunchConfig config;
  LogDir logDir;
  std::optional<LocalJob> job;
  std::optional<EventLog> events;
  std::shared_ptr<spdlog::logger> log;
  std::optional<WorkerStreams> streams;
  std::optional<FailureCollector> failures;
  std::optional<JobActions> actions;
  std::vector<Event> got;
};

}  // namespace

TEST_CASE("JobActions: join, the worker store, success, the state: each answer an event",
          "[job-actions]") {
  Bench b;
  b.job->watch([] {}, [](std::string) {});
  Event joined = b.step(action::Join{});
  REQUIRE(std::holds_alternative<event::Joined>(joined));
  const auto round = std::get<event::Joined>(joined).round;
  CHECK(round.round == 0);
  CHECK(round.worldSize == 2);
  Event store = b.step(action::GetWorkerStore{}, round);
  REQUIRE(std::holds_alternative<event::WorkerStoreReady>(store));
  CHECK(std::get<event::WorkerStoreReady>(store).store.port == 4321);
  Event done = b.step(action::MarkDone{0, 1});
  REQUIRE(std::holds_alternative<event::DoneReported>(done));
  CHECK(std::get<event::DoneReported>(done).ok);
  Event state = b.step(action::QueryState{0});
  REQUIRE(std::holds_alternative<event::StateRead>(state));
  // The join was recorded as it started.
  CHECK(readFile(b.dir.path() / "events.jsonl").find("\"rendezvous_started\"") !=
        std::string::npos);
}

TEST_CASE("JobActions: a failure reported job-wide is recorded, read back and parsed",
          "[job-actions]") {
  Bench b;
  b.job->watch([] {}, [](std::string) {});
  REQUIRE(std::holds_alternative<event::Joined>(b.step(action::Join{})));
  ProcessFailure f;
  f.rank = 1;
  f.localRank = 1;
  f.pid = 77;
  f.exitCode = 3;
  f.host = "node-a";
  f.timestampMs = 1700000000000;
  Action report = action::ReportFailure{0, f};
  REQUIRE(b.actions->run(report, {}));
  // The answer is a record of who decided the restart, not an event.
  REQUIRE(runUntil(b.io, [&] {
    return readFile(b.dir.path() / "events.jsonl").find("\"restart_decided\"") != std::string::npos;
  }));
  const auto line = readFile(b.dir.path() / "events.jsonl");
  CHECK(line.find("\"decided_here\":true") != std::string::npos);
  Event read = b.step(action::ReadFailures{0});
  REQUIRE(std::holds_alternative<event::FailuresRead>(read));
  const auto& failures = std::get<event::FailuresRead>(read).failures;
  REQUIRE(failures.size() == 1);
  CHECK(failures[0] == f);
  Event record = b.step(action::ReadJobRecord{});
  REQUIRE(std::holds_alternative<event::JobRecordRead>(record));
  CHECK(std::get<event::JobRecordRead>(record).error.empty());
}

TEST_CASE("JobActions: only the job's actions are taken, none answers after stop()",
          "[job-actions]") {
  Bench b;
  Action sweep = action::Sweep{};
  CHECK_FALSE(b.actions->run(sweep, {}));
  Action finish = action::Finish{};
  CHECK_FALSE(b.actions->run(finish, {}));
  Action join = action::Join{};
  REQUIRE(b.actions->run(join, {}));
  b.actions->stop();
  b.io.restart();
  b.io.run_for(std::chrono::milliseconds(200));  // the join's answer, had it been passed on
  CHECK(b.got.empty());
}
