#include "agent/failure_collector.h"

#include <fcntl.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "tests/agent/round_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using dtrun::ExitStatus;
using dtrun::SpawnSpec;
using dtrun::UniqueFd;
using dtrun::agent::FailedWorker;
using dtrun::agent::FailureCollector;
using dtrun::agent::LaunchConfig;
using dtrun::agent::LogDir;
using dtrun::agent::ProcessFailure;
using dtrun::agent::Std;
using dtrun::agent::WorkerStreams;
using dtrun::agent::testing::envTestConfig;
using dtrun::agent::testing::roundOf;
using dtrun::test::readFile;
using dtrun::test::runUntil;
using dtrun::test::TempDir;
using dtrun::test::writeFile;

namespace {

// torch's @record error file, as a worker leaves it.
const char* kErrorFile =
    R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nValueError: boom\n", "timestamp": "1796012051"}}})";

struct Fixture {
  explicit Fixture(Std redirects) {
    config = envTestConfig(2);
    config.entrypointName = "train.py";
    config.logDir = dir.path().string();
    config.localRanksFilter = std::set<int>{};  // no worker output on the test's console
    config.redirects.all = redirects;
    logDir.emplace(config.logDir, config.rdzv.runId);
    logDir->prepareAttempt(2, 2);
    log = std::make_shared<spdlog::logger>(
        "agent", std::make_shared<spdlog::sinks::ostream_sink_st>(logText));
    streams.emplace(io, config, *logDir, "node-b");
    streams->reset(2);
  }
  // Routes worker `lr`'s streams and writes `stderrText` on its stderr as the worker would.
  void runWorker(int lr, const std::string& stderrText) {
    SpawnSpec spawn;
    std::vector<UniqueFd> ends;
    streams->route(round, lr, spawn, ends);
    REQUIRE(::write(spawn.stderrFd, stderrText.data(), stderrText.size()) ==
            static_cast<ssize_t>(stderrText.size()));
    streams->closeOut(lr);
  }

  TempDir dir;
  LaunchConfig config;
  std::optional<LogDir> logDir;
  std::ostringstream logText;
  std::shared_ptr<spdlog::logger> log;
  boost::asio::io_context io;
  std::optional<WorkerStreams> streams;
  const dtrun::rendezvous::RoundInfo round = roundOf(2, 1, 2, 2);  // node 1 of 2: ranks 2, 3
};

}  // namespace

TEST_CASE("FailureCollector: a failed worker's error file, exit and stderr make its failure",
          "[failures]") {
  for (Std redirects : {Std::kNone, Std::kErr}) {  // stderr forwarded, or in its file
    INFO("redirects " << static_cast<int>(redirects));
    Fixture f(redirects);
    f.runWorker(1, "Traceback (most recent call last):\nValueError: boom\n");
    writeFile(f.logDir->errorFilePath(2, 1), kErrorFile);
    FailureCollector collector(f.config, *f.logDir, *f.streams, "node-b", f.log);
    std::optional<ProcessFailure> got;
    collector.collect(f.round, FailedWorker{1, 4242, ExitStatus{1, std::nullopt}, ""},
                      [&](ProcessFailure p) { got = std::move(p); });
    REQUIRE(runUntil(f.io, [&] { return got.has_value(); }));
    CHECK(got->rank == 3);
    CHECK(got->localRank == 1);
    CHECK(got->pid == 4242);
    CHECK(got->exitCode == 1);
    CHECK(got->host == "node-b");
    CHECK(got->fromErrorFile);
    CHECK(got->timestampMs == 1796012051000);
    CHECK(got->errorFile == f.logDir->errorFilePath(2, 1));
    CHECK(got->stderrTail ==
          std::vector<std::string>{"Traceback (most recent call last):", "ValueError: boom"});
    CHECK(f.logText.str().find("failed (exit code 1) local_rank: 1 (pid: 4242) of train.py") !=
          std::string::npos);
  }
}

TEST_CASE("FailureCollector: a worker that could not start, killed by a signal, no error file",
          "[failures]") {
  Fixture f(Std::kNone);
  f.runWorker(0, "");
  FailureCollector collector(f.config, *f.logDir, *f.streams, "node-b", f.log);
  std::optional<ProcessFailure> got;
  collector.collect(f.round,
                    FailedWorker{0, 77, ExitStatus{0, 9}, "cannot run train.py: not found"},
                    [&](ProcessFailure p) { got = std::move(p); });
  REQUIRE(runUntil(f.io, [&] { return got.has_value(); }));
  CHECK(got->exitCode == -9);
  CHECK(got->rank == 2);
  CHECK_FALSE(got->fromErrorFile);
  CHECK(got->errorFile.empty());
  CHECK(got->stderrTail == std::vector<std::string>{"cannot run train.py: not found"});
}

TEST_CASE("FailureCollector: the job's records are read back, an unreadable one is skipped",
          "[failures]") {
  Fixture f(Std::kNone);
  FailureCollector collector(f.config, *f.logDir, *f.streams, "node-b", f.log);
  ProcessFailure one;
  one.rank = 5;
  one.localRank = 1;
  one.pid = 9;
  one.exitCode = 3;
  one.host = "node-c";
  one.timestampMs = 1700000000000;
  one.message = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  const auto failures =
      collector.parse({nlohmann::json(one).dump(), "{not json", R"({"rank": 1})"});
  REQUIRE(failures.size() == 1);
  CHECK(failures[0] == one);
  // Both bad records are named in the log.
  const std::string text = f.logText.str();
  const auto first = text.find("unreadable failure record");
  REQUIRE(first != std::string::npos);
  CHECK(text.find("unreadable failure record", first + 1) != std::string::npos);
}

TEST_CASE("FailureCollector: the report is printed and the agent's error file written",
          "[failures]") {
  Fixture f(Std::kNone);
  const auto agentError = (f.dir.path() / "agent_error.json").string();
  f.config.baseEnv["TORCHELASTIC_ERROR_FILE"] = agentError;
  FailureCollector collector(f.config, *f.logDir, *f.streams, "node-b", f.log);
  ProcessFailure root;
  root.rank = 3;
  root.localRank = 1;
  root.pid = 4242;
  root.exitCode = 1;
  root.host = "node-b";
  root.timestampMs = 1796012051000;
  root.message = "ValueError: boom";
  ProcessFailure later = root;
  later.rank = 2;
  later.localRank = 0;
  later.timestampMs += 1000;
  const auto out = (f.dir.path() / "console.txt").string();
  {
    UniqueFd fd(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    REQUIRE(fd);
    collector.report({later, root}, fd.get());
  }
  const std::string text = readFile(out);
  INFO(text);
  // torch's block: the border as wide as its widest line, the title, the other failure, then
  // the root cause (the earlier one, listed second here).
  const std::string border(text.find('\n'), '=');
  CHECK(text.rfind(border + "\ntrain.py FAILED\n", 0) == 0);
  CHECK(border.size() >= std::string("train.py FAILED").size());
  const auto others = text.find("Failures:\n[0]:");
  const auto rootAt = text.find("Root Cause (first observed failure):\n[1]:");
  REQUIRE(others != std::string::npos);
  REQUIRE(rootAt != std::string::npos);
  CHECK(text.find("rank      : 2 (local_rank: 0)", others) < rootAt);
  CHECK(text.find("rank      : 3 (local_rank: 1)", rootAt) != std::string::npos);
  CHECK(text.back() == '\n');
  // torch's @record: the root cause (the earlier failure), with its exit code as errorCode.
  const auto written = nlohmann::json::parse(readFile(agentError));
  CHECK(written["message"]["errorCode"] == 1);
  CHECK(written.dump().find("ValueError: boom") != std::string::npos);
}
